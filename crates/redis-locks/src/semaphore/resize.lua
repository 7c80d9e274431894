-- resize.lua: change a semaphore's number of permits on purpose (after the preludes
-- lock.lua, queue.lua and permits.lua).
--
-- KEYS[1]  the semaphore: its hash, or a permit kept as a plain key (see permits.lua).
-- KEYS[2]  the queue.
-- KEYS[3]  the places.
-- KEYS[4]  the ticket counter.
-- ARGV[1]  the new N (a positive integer).
-- ARGV[2]  the wake channel.
--
-- Reply: the N it replaced, or 0 when nobody held or waited (nothing is stored then: the
-- next acquirer's N counts). Holders keep their permits when N shrinks below what they hold;
-- nobody is granted more until enough are released. When N grows, the first waiter is
-- woken.
-- Errors:
--   WRONGTYPE <key> ...  a key holds another Redis type, or a hash that is no semaphore's.
--   NOPERM ...           the user may not run PEXPIRE (asked before anything is written).

local limit, channel = tonumber(ARGV[1]), ARGV[2]
local now = server_ms()
local state, wrong = permits_open(KEYS[1], KEYS[2], KEYS[3], KEYS[4], now)
if not state then
  return wrong
end
local before = state.limit or 0
permits_write(KEYS[1], state, 'limit', limit)
permits_keep(KEYS[1], KEYS[2], state, now)
local head = queue_head(KEYS[2])
if head and state.used < limit then
  wake(channel, head)
end
return before
