-- resize.lua: change a semaphore's number of permits on purpose (after the preludes
-- lock.lua, queue.lua and permits.lua).
--
-- KEYS[1]  the holders (see permits.lua).
-- KEYS[2]  the permits hash.
-- KEYS[3]  the queue.
-- KEYS[4]  the places.
-- ARGV[1]  the new N (a positive integer).
-- ARGV[2]  the wake channel.
--
-- Reply: the N it replaced, or 0 when nobody held or waited (nothing is stored then: the
-- next acquirer's N counts). Holders keep their permits when N shrinks below what they hold;
-- nobody is granted more until enough are released. When N grows, the first waiter is
-- woken.
-- Errors:
--   WRONGTYPE <key> ...  a key holds another Redis type.

local limit, channel = tonumber(ARGV[1]), ARGV[2]
local wrong = wrong_kind(KEYS[1], 'zset', 'a semaphore') or
  wrong_kind(KEYS[2], 'hash', 'a semaphore') or wrong_kind(KEYS[3], 'zset', 'a semaphore') or
  wrong_kind(KEYS[4], 'zset', 'a semaphore')
if wrong then
  return wrong
end
local now = server_ms()
local used = permits_reclaim(KEYS[1], KEYS[2], now)
queue_purge(KEYS[3], KEYS[4], now)
local before = permits_limit(KEYS[2]) or 0
redis.call('HSET', KEYS[2], 'limit', limit)
permits_keep(KEYS[1], KEYS[2], KEYS[3], now)
local head = queue_head(KEYS[3])
if head and used < limit then
  wake(channel, head)
end
return before
