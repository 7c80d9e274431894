-- extend.lua: give a held Mutex (or FairMutex) a new lease, but only for its owner (after
-- the lock.lua prelude: owner_refusal).
--
-- KEYS[1]  the lock key.
-- ARGV[1]  the owner token the caller acquired with.
-- ARGV[2]  the new lease in milliseconds, counted from now (a positive integer).
-- ARGV[3]  optional; '1': restore a key that is gone (a Redlock's renewal, see below). ''
--          or absent: a gone key stays gone.
--
-- Replies:
--    1  extended: the key held ARGV[1] (marked by a waiter or not, see lock.lua)
--       and now expires ARGV[2] ms from now; the mark is kept.
--    0  not extended: the key is gone (the lease ran out).
--    2  with ARGV[3] = '1' only, instead of 0: the key was gone and now holds ARGV[1] for
--       ARGV[2] ms. This is no proof that the owner held the lock meanwhile (a Redlock
--       counts only 1 towards its majority): it puts the holder's key back on a node that
--       lost it (a restart without its data) or never got it (down, or too slow, when the
--       lock was taken), so that the lock stands on that node again while a majority holds.
--   -1  not extended: the key holds another owner's token; it is left untouched.
-- Errors:
--   WRONGTYPE  KEYS[1] is not a string.

local refused = owner_refusal(KEYS[1], ARGV[1])
if refused == 0 and ARGV[3] == '1' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
if refused then
  return refused
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
