-- extend.lua: renew several locks taken together, owner-checked, all or none (after the
-- preludes lock.lua: holder_of, wrong_kind; lines.lua: locks, lock_key).
--
-- KEYS     per lock, five (see lines.lua); the first of each is the lock key, the only one
--          read here.
-- ARGV[1]  the owner token.
-- ARGV[2]  the new lease in ms, from now (a positive integer).
--
-- Replies:
--   {1}      every lock is ARGV[1]'s and now lasts ARGV[2] ms more (marks kept).
--   {0, i}   nothing extended: lock i's key is gone (its lease ran out).
--   {-1, i}  nothing extended: lock i holds another owner's token.
-- Errors (nothing written):
--   WRONGTYPE <key> ...  a lock key holds another Redis type.

local owner, lease = ARGV[1], ARGV[2]
local count = locks()
for i = 1, count do
  local wrong = wrong_kind(lock_key(i, 1), 'string', 'a lock')
  if wrong then
    return wrong
  end
end
for i = 1, count do
  local holder = holder_of(lock_key(i, 1))
  if not holder then
    return {0, i}
  end
  if holder ~= owner then
    return {-1, i}
  end
end
for i = 1, count do
  redis.call('PEXPIRE', lock_key(i, 1), lease)
end
return {1}
