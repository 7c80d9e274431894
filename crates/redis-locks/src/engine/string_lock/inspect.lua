-- inspect.lua: read a Mutex's (or FairMutex's) state in one consistent step (after the
-- preludes fence.lua (read_counter) and lock.lua (holder_of)). Writes nothing.
--
-- KEYS[1]  the lock key.
-- KEYS[2]  the fencing counter.
-- ARGV[1]  optional; the lock's wake channel, whose subscribers are counted.
--
-- Replies:
--   {owner, pttl, counter, marked, listeners}
--     owner    the holder's owner token (without a waiter's mark, see
--              lock.lua), or '' when the lock is free.
--     pttl     the holder's remaining lease in ms; -2 when free; -1 when the key has no
--              expiry (it was not written by this library).
--     counter  the fencing counter: the latest fencing token handed out (the holder's, or a
--              later one taken by a refused fast attempt); 0 if the lock was never taken.
--     marked   1 if the holder's key is marked for a wake-up (by a waiter, or at its grant
--              for waiters queued in the holder's process): its release will publish one;
--              else 0. The mark stays for the holder's whole tenure, even after the
--              waiter that made it has gone.
--     listeners  how many connections subscribe to ARGV[1] now (PUBSUB NUMSUB): one per
--              process (client) with a waiter of this lock waiting right now; 0 without
--              ARGV[1].
-- Errors:
--   WRONGTYPE  KEYS[1] is not a string, or is another primitive's plain key (a semaphore's
--              permit or an RwLock's read hold, see plain_other in lock.lua).
--   WRONGTYPE <key> ...  KEYS[2] is not an integer (or not a string).

local owner, is_marked = holder_of(KEYS[1])
local other = plain_other(KEYS[1], owner)
if other then
  return other
end
local pttl = -2
local marked = 0
if owner then
  pttl = redis.call('PTTL', KEYS[1])
  if is_marked then
    marked = 1
  end
else
  owner = ''
end
local counter, err = read_counter(KEYS[2])
if not counter then
  return err
end
local listeners = 0
if ARGV[1] then
  listeners = redis.call('PUBSUB', 'NUMSUB', ARGV[1])[2]
end
return {owner, pttl, counter, marked, listeners}
