-- release.lua: release a Mutex, but only for its owner, and wake its waiters (after the
-- waiters.lua prelude: holder_of, wake_all).
--
-- KEYS[1]  the lock key.
-- ARGV[1]  the owner token the caller acquired with.
-- ARGV[2]  the lock's wake channel; on release, '*' is published there (wake every waiter)
--          if a waiter marked the lock (see waiters.lua).
--
-- Replies:
--    1  released: the key held ARGV[1] (marked or not) and is now deleted; marked: waiters
--       were woken.
--    0  not released: the key is gone (the lease ran out, or the lock was never taken).
--   -1  not released: the key holds another owner's token (the lease ran out and
--       somebody else took the lock); that owner's lock is left untouched.
-- Errors:
--   WRONGTYPE  KEYS[1] is not a string.

local holder, marked = holder_of(KEYS[1])
if not holder then
  return 0
end
if holder ~= ARGV[1] then
  return -1
end
redis.call('DEL', KEYS[1])
if marked then
  wake_all(ARGV[2])
end
return 1
