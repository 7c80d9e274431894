-- release.lua: leave a FairMutex — release it if held, give up a place in the queue
-- if waiting — and hand the lock to the next waiter, or wake it (after the preludes
-- fence.lua, whose next_token the handover calls, lock.lua: holder_of, wake; and queue.lua:
-- the queue, the handover).
--
-- KEYS[1]  the lock key.
-- KEYS[2]  the queue (sorted set of owner tokens by ticket).
-- KEYS[3]  the places (sorted set of owner tokens by place-lease deadline, server ms).
-- KEYS[4]  the ticket counter.
-- ARGV[1]  the owner token of the holder, or of the waiter giving up.
-- ARGV[2]  the wake channel: when the lock is free after this call and somebody waits,
--          the head waiter's owner token is published there (only that waiter acts on it);
--          with KEYS[5] and a token registered by the head, the lock is handed to it
--          instead (hand_over in queue.lua publishes '<token> <token> <nonce> <fencing
--          token>').
-- KEYS[5]  optional, with KEYS[6]: the handover hash and the fencing counter.
--
-- Replies:
--    1  released: the lock key held ARGV[1] and is now deleted.
--    0  the lock key is gone (the lease ran out, or ARGV[1] was only waiting, or never
--       anything); any place ARGV[1] had in the queue is given up.
--   -1  the lock key holds another owner's token; it is left untouched. Any place ARGV[1]
--       had in the queue is given up.
-- A second run of a release that gave 1 (a cluster client's retry) gives 1 again, for
-- RELEASED_MS (see released_before in lock.lua).
-- Errors:
--   WRONGTYPE  KEYS[1] is not a string, or KEYS[2] or KEYS[3] is not a sorted set.

local owner, channel = ARGV[1], ARGV[2]
local wanted = {'string', 'zset', 'zset', 'string', 'hash'}
for i = 1, (given(5) and 5) or 4 do
  local kind = redis.call('TYPE', KEYS[i]).ok
  if kind ~= 'none' and kind ~= wanted[i] then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. kind)
  end
end

local now = server_ms()
queue_purge(KEYS[2], KEYS[3], now)
queue_leave(KEYS[2], KEYS[3], KEYS[4], owner)
if given(5) and handover_owner(KEYS[5], owner) == owner then
  redis.call('HDEL', KEYS[5], owner)
end

-- A Mutex waiter's mark is not part of the owner token (holder_of strips it).
local holder, marked = holder_of(KEYS[1])
local result = 0
if holder == owner then
  redis.call('DEL', KEYS[1])
  remember_release(1)
  result = 1
elseif released_before() then
  -- A second run of a release that succeeded (a retried request) says so again.
  return 1
elseif holder then
  return -1
end

local head = queue_head(KEYS[2])
if head and result == 1 and given(5) and
    hand_over(KEYS[1], KEYS[5], redis.call('HGET', KEYS[5], head), KEYS[6], KEYS[2], KEYS[3],
      KEYS[4], channel, head, now) then
  return result
end
if head then
  wake(channel, head)
elseif marked and result == 1 then
  -- Marked by Mutex waiters of this process that hold no place in line: wake them all.
  wake_all(channel)
end
return result
