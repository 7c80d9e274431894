-- acquire.lua (handoff_floor example): the least a lock that hands itself to the next waiter
-- can do to take it or get in line. Not a lock of the library: no fencing token, no place
-- lease, no wrong-type checks.
--
-- KEYS[1]  the lock key (a string holding the holder's id).
-- KEYS[2]  the queue (a list of waiter ids, first in line first).
-- ARGV[1]  the caller's id (it listens on its own channel before it asks).
-- ARGV[2]  the lease in milliseconds (of the lock, and of the queue).
--
-- Replies:
--   1  taken: KEYS[1] holds ARGV[1] with the lease.
--   0  held by another: ARGV[1] is at the back of the queue; the release that finds it first
--      hands it the lock and publishes on its channel.

if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 0
