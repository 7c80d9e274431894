-- extend.lua: set the lease of one hold of a lock kept in a hash, by its hold id (after the
-- preludes waiters.lua and holds.lua). Only this hold's deadline changes; the key lives at
-- least as long as its latest hold.
--
-- KEYS[1]  the lock key (a hash, see holds.lua).
-- ARGV[1]  the hold id.
-- ARGV[2]  the new lease in milliseconds, counted from now (a positive integer).
--
-- Replies:
--   1  extended: the hold was live and now ends ARGV[2] ms from now.
--   0  not extended: the hold is gone (its lease ran out). Expired holds are cleaned up.
-- Errors (nothing written):
--   WRONGTYPE <key> ...  KEYS[1] is not a hash.

local key, hold, lease = KEYS[1], ARGV[1], tonumber(ARGV[2])
local found = redis.call('TYPE', key).ok
if found ~= 'none' and found ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. found .. ', not a lock of holds')
end
local now = server_ms()
local state = holds_read(key, now, true)
local mine = state.holds[hold]
if not mine then
  return 0
end
redis.call('HSET', key, 'h:' .. hold, hold_value(now + lease, mine.mode, mine.token, mine.owner))
holds_keep(key, now, now + lease)
return 1
