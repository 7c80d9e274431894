-- extend.lua: renew the lease of a semaphore's permits, owner-checked (after the preludes
-- lock.lua and permits.lua).
--
-- KEYS[1]  the holders (see permits.lua).
-- KEYS[2]  the permits hash.
-- KEYS[3]  the queue (its TTL bounds the permits hash's).
-- ARGV[1]  the owner token.
-- ARGV[2]  the new lease in ms, from now (a positive integer).
--
-- Replies:
--   1  extended: ARGV[1]'s permits are its until now + ARGV[2] (server clock).
--   0  ARGV[1] holds no permits: its lease ended (the permits came back), or it released.
-- Errors (nothing written):
--   WRONGTYPE <key> ...  a key holds another Redis type.

local owner, lease = ARGV[1], tonumber(ARGV[2])
local wrong = wrong_kind(KEYS[1], 'zset', 'a semaphore') or
  wrong_kind(KEYS[2], 'hash', 'a semaphore')
if wrong then
  return wrong
end
local now = server_ms()
local ends = tonumber(redis.call('ZSCORE', KEYS[1], owner))
if not ends or ends <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + lease, owner)
permits_keep(KEYS[1], KEYS[2], KEYS[3], now)
return 1
