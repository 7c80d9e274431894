-- release.lua: give back one hold of a lock kept in a hash, by its hold id, and wake the
-- waiters that may enter now (after the preludes lock.lua, queue.lua and holds.lua). Also gives up
-- the caller's place in the queue, if it still has one: this is how a wait that ends
-- without the lock (or a cancelled one) leaves the line.
--
-- KEYS[1]  the lock key (a hash, or a read hold kept as a plain key: see holds.lua).
-- KEYS[2]  the lock's queue of waiters, KEYS[3] its place leases, KEYS[4] its ticket counter.
-- ARGV[1]  the hold id the caller acquired with (its place in the queue was 'r' or 'w'
--          followed by it).
-- ARGV[2]  the lock's wake channel.
--
-- Replies:
--   {1, left}  released; left is how many holds of the same owner and mode are still live
--              (a ReentrantMutex's or a writer's hold count; 0 when the owner holds no more
--              in this mode). When the release let waiters in (see wake_front), they were
--              woken.
--              A second run of a release that succeeded (a cluster client's retry) gives
--              its reply again, for RELEASED_MS (see released_before in lock.lua).
--   {0, 0}     not released: the hold is gone (its lease ran out, or it was never granted).
--              Nothing else is changed, except that expired holds are cleaned up and the
--              caller's place, if any, is given up (waking whoever may enter now).
-- Errors (nothing written):
--   WRONGTYPE <key> ...  KEYS[1] is not a lock of holds (another type: a Mutex holds the
--                        name; or a hash that is not one), or a queue key holds another type.

local key, hold = KEYS[1], ARGV[1]
local wrong, now, state, released = holds_find(KEYS, hold)
if wrong then
  return wrong
end
local left = 0
if released then
  state.holds[hold] = nil
  state.count = state.count - 1
  if released.mode == 'w' then
    state.writes = state.writes - 1
    left = state.writes
  else
    state.reads_of[released.owner] = state.reads_of[released.owner] - 1
    left = state.reads_of[released.owner]
  end
  remember_release(left)
  if state.count == 0 then
    redis.call('DEL', key)
  else
    if state.writes == 0 and released.mode == 'w' then
      redis.call('HDEL', key, 'h:' .. hold, 'writer', 'token')
    else
      redis.call('HDEL', key, 'h:' .. hold)
    end
  end
end
queue_purge(KEYS[2], KEYS[3], now)
queue_leave(KEYS[2], KEYS[3], KEYS[4], 'r' .. hold)
queue_leave(KEYS[2], KEYS[3], KEYS[4], 'w' .. hold)
if redis.call('EXISTS', KEYS[2]) == 1 then
  wake_front(KEYS[2], ARGV[2], state)
end
if released then
  -- The key now expires with the latest hold left (sooner, if this one was the latest);
  -- after the wake-ups, so that a refused PEXPIREAT (its error is the reply) wakes nobody
  -- less. The key keeps its later expiry then: no hold outlives it.
  if state.count > 0 then
    local refused = holds_expire(key, state)
    if refused then
      return refused
    end
  end
  return {1, left}
end
-- A second run of a release that succeeded (a retried request) says so again.
local before = released_before()
if before then
  return {1, before}
end
return {0, 0}
