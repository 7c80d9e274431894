-- mutex_release.lua: release a Mutex, but only for its owner, and wake its waiters.
--
-- KEYS[1]  the lock key.
-- ARGV[1]  the owner token the caller acquired with.
-- ARGV[2]  the lock's wake channel; on release, '*' is published there (wake every waiter)
--          if a waiter marked the lock (the key holds ARGV[1] .. '+w', see mutex_acquire.lua).
--
-- Replies:
--    1  released: the key held ARGV[1] (marked or not) and is now deleted; marked: waiters
--       were woken.
--    0  not released: the key is gone (the lease ran out, or the lock was never taken).
--   -1  not released: the key holds another owner's token (the lease ran out and
--       somebody else took the lock); that owner's lock is left untouched.
-- Errors:
--   WRONGTYPE  KEYS[1] is not a string.

local holder = redis.call('GET', KEYS[1])
if not holder then
  return 0
end
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if holder == ARGV[1] .. '+w' then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '*')
  return 1
end
return -1
