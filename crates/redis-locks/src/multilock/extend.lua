-- extend.lua: renew several locks taken together, owner-checked, all or none (after the
-- prelude waiters.lua: holder_of, wrong_kind).
--
-- KEYS[3i-2], KEYS[3i-1], KEYS[3i]  the i-th lock key, its fencing counter and its queue
--          (as acquire.lua).
-- ARGV[1]  the owner token.
-- ARGV[2]  the new lease in ms, from now (a positive integer).
--
-- Replies:
--   {1}      every lock is ARGV[1]'s and now lasts ARGV[2] ms more (marks kept).
--   {0, i}   nothing extended: the i-th lock's key is gone (its lease ran out).
--   {-1, i}  nothing extended: the i-th lock holds another owner's token.
-- Errors (nothing written):
--   WRONGTYPE <key> ...  a lock key holds another Redis type.

local owner, lease = ARGV[1], ARGV[2]
local count = #KEYS / 3
for i = 1, count do
  local wrong = wrong_kind(KEYS[3 * i - 2], 'string', 'a lock')
  if wrong then
    return wrong
  end
end
for i = 1, count do
  local holder = holder_of(KEYS[3 * i - 2])
  if not holder then
    return {0, i}
  end
  if holder ~= owner then
    return {-1, i}
  end
end
for i = 1, count do
  redis.call('PEXPIRE', KEYS[3 * i - 2], lease)
end
return {1}
