-- leave.lua: a waiter gives up its place in a lock's queue (after the preludes lock.lua:
-- holder_of, server_ms, mark_waited, wake; and queue.lua: the queue, the handover). If others still wait:
-- when the lock is free, the new first waiter is woken (the one leaving may have been woken
-- for this very release and will not take the lock now); when it is held, it is marked, so
-- that its release wakes them.
--
-- KEYS[1]  the lock key.
-- KEYS[2]  the queue (sorted set of waiter ids by ticket).
-- KEYS[3]  the place leases (sorted set of waiter ids by lease end, server ms).
-- KEYS[4]  the ticket counter.
-- KEYS[5]  optional, with ARGV[3]: the handover hash (a Mutex's waiters). A KEYS[6] (the
--          fencing counter, which the releases that hand over take too) is not used.
-- ARGV[1]  the waiter id that leaves.
-- ARGV[2]  the lock's wake channel.
-- ARGV[3]  optional, with KEYS[5]: the owner token the waiter registered for a handover. A
--          lock handed to it that no waiter took (it was handed over as the last waiter
--          gave up) is released first, and the registration is taken out.
--
-- Replies:
--   1  the waiter had a place and left it.
--   0  it had none (its place lease had run out, or it was granted the lock meanwhile).
-- Errors:
--   WRONGTYPE  a queue key or the handover hash holds another type (the server's error,
--              or the handover's type check, before anything is written).

local handover = KEYS[5] and ARGV[3] and ARGV[3] ~= '' and KEYS[5]
local handed = false
if handover then
  local wrong = handover_wrong_type(handover)
  if wrong then
    return wrong
  end
  handed = holder_of(KEYS[1]) == ARGV[3]
end
queue_purge(KEYS[2], KEYS[3], server_ms())
local had = redis.call('ZSCORE', KEYS[2], ARGV[1])
queue_leave(KEYS[2], KEYS[3], KEYS[4], ARGV[1])
if handover then
  -- Only this token's registration: a later wait of the same process may have registered
  -- its own under the same id meanwhile.
  if handover_owner(handover, ARGV[1]) == ARGV[3] then
    redis.call('HDEL', handover, ARGV[1])
  end
  if handed then
    redis.call('DEL', KEYS[1])
  end
end
local head = queue_head(KEYS[2])
if head then
  if not holder_of(KEYS[1]) then
    wake(ARGV[2], head)
  elseif redis.call('PTTL', KEYS[1]) >= 0 then
    -- Held (by a fast grant, say, which does not mark): its release must wake the line.
    mark_waited(KEYS[1])
  end
end
if had then
  return 1
end
return 0
