-- release.lua (handoff_floor example): the least an owner-checked release that hands the
-- lock to the first waiter can do.
--
-- KEYS[1]  the lock key.
-- KEYS[2]  the queue.
-- ARGV[1]  the caller's id.
-- ARGV[2]  the lease in milliseconds of a lock handed over.
-- ARGV[3]  the prefix of the waiters' channels (a waiter's channel is the prefix and its id).
--
-- Replies:
--   2  handed over: the first waiter holds the lock with the lease, and '1' was published on
--      its channel.
--   1  released: nobody waited, KEYS[1] is deleted.
--   0  not released: KEYS[1] does not hold ARGV[1].

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local waiter = redis.call('LPOP', KEYS[2])
if waiter then
  redis.call('SET', KEYS[1], waiter, 'PX', ARGV[2])
  redis.call('PUBLISH', ARGV[3] .. waiter, '1')
  return 2
end
redis.call('DEL', KEYS[1])
return 1
