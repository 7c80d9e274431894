-- extend.lua: give a held Mutex (or FairMutex) a new lease, but only for its owner (after
-- the waiters.lua prelude: owner_refusal).
--
-- KEYS[1]  the lock key.
-- ARGV[1]  the owner token the caller acquired with.
-- ARGV[2]  the new lease in milliseconds, counted from now (a positive integer).
--
-- Replies:
--    1  extended: the key held ARGV[1] (marked by a waiter or not, see waiters.lua)
--       and now expires ARGV[2] ms from now; the mark is kept.
--    0  not extended: the key is gone (the lease ran out).
--   -1  not extended: the key holds another owner's token; it is left untouched.
-- Errors:
--   WRONGTYPE  KEYS[1] is not a string.

local refused = owner_refusal(KEYS[1], ARGV[1])
if refused then
  return refused
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
