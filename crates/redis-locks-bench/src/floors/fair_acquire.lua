-- fair_acquire.lua: the least a first-come-first-served lock must send to be taken, the floor
-- `bench throughput --kind fair-mutex` measures the library's FairMutex against. Not a lock:
-- no line to join when refused, no restart-proof seed of the fencing counter, no marks; only
-- what any fair lock runs at the least, in one script (a newcomer may take a free lock only
-- while nobody waits in line, and the look at the line and the take must be atomic). Its
-- release is the bare compare-and-delete (`bare_release.lua`): a waiter marks the lock, as
-- the library's do, so an unmarked owner token means nobody waits.
--
-- KEYS[1]  the lock key.
-- KEYS[2]  the fencing counter.
-- KEYS[3]  the waiting line: while it exists, a newcomer is refused.
-- ARGV[1]  the owner token.
-- ARGV[2]  the lease in milliseconds.
--
-- Replies:
--   token  granted: the new fencing token (INCR of KEYS[2]); KEYS[1] holds ARGV[1] for the
--          lease.
--   0      refused: somebody waits in line, or the lock is held.

if redis.call('EXISTS', KEYS[3]) == 0 and
    redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
