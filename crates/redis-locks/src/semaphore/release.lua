-- release.lua: give a semaphore's permits back, or give up a place in its queue, and wake
-- the first waiter if permits are free (after the preludes lock.lua, queue.lua and
-- permits.lua).
--
-- KEYS[1]  the holders (see permits.lua).
-- KEYS[2]  the permits hash.
-- KEYS[3]  the queue.
-- KEYS[4]  the places.
-- KEYS[5]  the ticket counter.
-- KEYS[6]  optional: ARGV[1]'s tombstone key, where the client may run a script twice (see
--          tombstone in lock.lua).
-- ARGV[1]  the owner token of the holder, or of the waiter giving up.
-- ARGV[2]  the wake channel.
--
-- Replies:
--    1  released: ARGV[1] held permits (its lease had not ended), and they are free now.
--    0  ARGV[1] holds no permits: its lease ended (the permits came back then), or it was
--       only waiting, or never anything. Any place it had in the queue is given up.
-- A second run of a release that gave 1 (a cluster client's retry) gives 1 again (see
-- released_before in lock.lua). Permits have no "taken" state: never -1.
-- Errors (nothing written):
--   WRONGTYPE <key> ...  a key holds another Redis type.

local owner, channel = ARGV[1], ARGV[2]
local kinds = {'zset', 'hash', 'zset', 'zset', 'string'}
for i = 1, 5 do
  local wrong = wrong_kind(KEYS[i], kinds[i], 'a semaphore')
  if wrong then
    return wrong
  end
end

local now = server_ms()
local used = permits_reclaim(KEYS[1], KEYS[2], now)
queue_purge(KEYS[3], KEYS[4], now)
queue_leave(KEYS[3], KEYS[4], KEYS[5], owner)
local result = 0
if redis.call('ZREM', KEYS[1], owner) == 1 then
  used = used - (tonumber(redis.call('HGET', KEYS[2], owner)) or 0)
  redis.call('HDEL', KEYS[2], owner)
  redis.call('HSET', KEYS[2], 'used', used)
  remember_release(1)
  result = 1
elseif released_before() then
  return 1
end
local limit = permits_limit(KEYS[2])
local head = queue_head(KEYS[3])
if head and limit and used < limit then
  wake(channel, head)
end
permits_keep(KEYS[1], KEYS[2], KEYS[3], now)
return result
