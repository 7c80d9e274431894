-- leave.lua: a waiter gives up its place in a lock's queue (after the waiters.lua prelude:
-- holder_of, wake, the queue). If the lock is free, the new first waiter is woken: the one
-- leaving may have been woken for this very release and will not take the lock now.
--
-- KEYS[1]  the lock key.
-- KEYS[2]  the queue (sorted set of waiter ids by ticket).
-- KEYS[3]  the place leases (sorted set of waiter ids by lease end, server ms).
-- KEYS[4]  the ticket counter.
-- ARGV[1]  the waiter id that leaves.
-- ARGV[2]  the lock's wake channel.
--
-- Replies:
--   1  the waiter had a place and left it.
--   0  it had none (its place lease ran out, or it was granted the lock meanwhile).
-- Errors:
--   WRONGTYPE  a queue key holds another type (the server's error).

local had = redis.call('ZSCORE', KEYS[2], ARGV[1])
local clock = redis.call('TIME')
queue_purge(KEYS[2], KEYS[3], tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000))
queue_leave(KEYS[2], KEYS[3], KEYS[4], ARGV[1])
if not holder_of(KEYS[1]) then
  local head = queue_head(KEYS[2])
  if head then
    wake(ARGV[2], head)
  end
end
if had then
  return 1
end
return 0
