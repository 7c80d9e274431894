-- release.lua: release a Mutex, but only for its owner, and hand the lock to the next waiter
-- or wake it (after the preludes fence.lua (next_token, which the handover calls: only a
-- release with KEYS[5] needs it), lock.lua (owner_refusal, server_ms, wake, wake_all, checked)
-- and queue.lua (the queue: queue_look, queue_drop; the handover)).
--
-- KEYS[1]  the lock key.
-- KEYS[2]  optional, with KEYS[3] and KEYS[4]: the lock's queue of waiters, its place
--          leases and its ticket counter (see the queue in queue.lua).
-- KEYS[5]  optional, with KEYS[6]: the lock's handover hash (waiter id -> '<owner token>
--          <nonce>', see acquire.lua) and
--          its fencing counter. Given by a Mutex's release, not by a Redlock node's (a
--          majority of nodes must grant a Redlock, so one node never hands it over).
-- ARGV[1]  the owner token the caller acquired with.
-- ARGV[2]  the lock's wake channel. If a waiter marked the lock (see lock.lua), the
--          release looks for the first waiter in the queue whose place is still leased:
--          with KEYS[5] and an owner token registered for it, the lock is handed to that
--          token (hand_over in queue.lua publishes '<waiter id> <owner> <nonce>
--          <fencing token>');
--          otherwise that waiter is woken (wake in lock.lua: only that process's waiter
--          acts on it), or '*' is published (every waiter looks again) when nobody is in
--          line. A release nobody waited for publishes nothing. (The waiters of the
--          releasing process queued behind the holder are woken by that process itself.)
-- ARGV[3]  optional, with KEYS[5]: a Redlock's proposed token (its client clock in µs, a
--          positive integer below 2^53): a handover's fencing token is then
--          max(counter + 1, ARGV[3]) instead of max(counter + 1, server clock in µs), so that
--          the nodes of a Redlock hand over under one token (see hand_over in queue.lua).
--
-- Replies:
--    1  released: the key held ARGV[1] (marked or not) and is now deleted, or handed to the
--       next waiter; marked: the next waiter was handed the lock or woken.
--    0  not released: the key is gone (the lease ran out, or the lock was never taken).
--   -1  not released: the key holds another owner's token (the lease ran out and
--       somebody else took the lock); that owner's lock is left untouched.
-- A second run of a release that gave 1 (a cluster client's retry) gives 1 again, for
-- RELEASED_MS (see released_before in lock.lua).
-- Errors (nothing written):
--   WRONGTYPE  KEYS[1] is not a string, or (for a marked key, with KEYS[2]) a queue key
--              or the handover hash that the release reads or may write holds another
--              type: the queue and the places always, the ticket counter when nobody live
--              stands behind the first waiter (or nobody live is in line: the counter is
--              then deleted with the line), the handover hash when somebody is in line
--              (queue_look in queue.lua, checked in lock.lua).

local refused, marked = owner_refusal(KEYS[1], ARGV[1])
if refused then
  -- A second run of a release that succeeded (a retried request) says so again.
  return released_before() or refused
end
-- Somebody waits only if the key was marked: a waiter's refusal marks it, and so does a
-- waiter's grant while others are still in line (see acquire.lua), and every handover. The
-- line is read (and TIME, and with KEYS[5] the first waiter's registration) before anything
-- is written, each queue key's type checked by the read itself (queue_look, checked), so that
-- an error leaves the lock as it was.
local head = nil
local now = nil
local registered = false
local behind = false
if given(2) and marked then
  now = server_ms()
  local expired, first
  expired, first, behind = queue_look(KEYS[2], KEYS[3], KEYS[4], now)
  if not expired then
    return first
  end
  head = first
  if head and given(5) then
    local err
    registered, err = checked(KEYS[5], 'a handover hash', 'HGET', KEYS[5], head)
    if err then
      return err
    end
  end
  queue_drop(KEYS[2], KEYS[3], expired)
  if not head and #expired > 0 then
    -- Only waiters whose place had run out were in line: the line is empty now, and its
    -- counter goes with it (its type was looked at by queue_look).
    redis.call('DEL', KEYS[4])
  end
end
if head and given(5) and
    hand_over(KEYS[1], KEYS[5], registered, KEYS[6], KEYS[2], KEYS[3], KEYS[4], ARGV[2], head, now,
      not behind, tonumber(ARGV[3] or '')) then
  remember_release(1)
  return 1
end
redis.call('DEL', KEYS[1])
remember_release(1)
if head then
  wake(ARGV[2], head)
elseif marked then
  wake_all(ARGV[2])
end
return 1
