-- release.lua: release a Mutex, but only for its owner, and wake the next waiter (after the
-- waiters.lua prelude: owner_refusal, server_ms, wake, wake_all, the queue).
--
-- KEYS[1]  the lock key.
-- KEYS[2]  optional, with KEYS[3] and KEYS[4]: the lock's queue of waiters, its place
--          leases and its ticket counter (see the queue in waiters.lua).
-- ARGV[1]  the owner token the caller acquired with.
-- ARGV[2]  the lock's wake channel. If a waiter marked the lock (see waiters.lua), the
--          release publishes there the id of the first waiter in the queue whose place is
--          still leased (only that process's waiter acts on it, and the waiters of the
--          releasing process queued behind the holder), or '*' (every waiter looks again)
--          when nobody is in line. A release nobody waited for publishes nothing.
--
-- Replies:
--    1  released: the key held ARGV[1] (marked or not) and is now deleted; marked: the next
--       waiter was woken.
--    0  not released: the key is gone (the lease ran out, or the lock was never taken).
--   -1  not released: the key holds another owner's token (the lease ran out and
--       somebody else took the lock); that owner's lock is left untouched.
-- Errors (nothing written):
--   WRONGTYPE  KEYS[1] is not a string, or (for a marked key) a queue key holds another
--              type.

local refused, marked = owner_refusal(KEYS[1], ARGV[1])
if refused then
  return refused
end
-- Somebody waits only if the key was marked: a waiter's refusal marks it, and so does a
-- waiter's grant while others are still in line (see acquire.lua). The queue is read (and
-- TIME, and the queue's types checked by the calls) before anything is written, so that an
-- error leaves the lock as it was.
local head = nil
if KEYS[2] and marked then
  local now = server_ms()
  local wrong = queue_wrong_type(KEYS[2], KEYS[3], KEYS[4])
  if wrong then
    return wrong
  end
  queue_purge(KEYS[2], KEYS[3], now)
  head = queue_head(KEYS[2])
end
redis.call('DEL', KEYS[1])
if head then
  wake(ARGV[2], head)
elseif marked then
  wake_all(ARGV[2])
end
return 1
