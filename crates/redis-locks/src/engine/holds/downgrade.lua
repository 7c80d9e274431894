-- downgrade.lua: turn one write hold of an RwLock into a read hold of the same owner, in one
-- step, so that no other writer can enter in between (after the preludes lock.lua,
-- queue.lua and holds.lua). The hold keeps its lease and its fencing token. When it was the owner's last
-- write hold, the readers at the front of the queue are woken.
--
-- KEYS[1]  the lock key (a hash, or a read hold kept as a plain key: see holds.lua).
-- KEYS[2]  the lock's queue of waiters, KEYS[3] its place leases, KEYS[4] its ticket counter.
-- ARGV[1]  the hold id of the write hold.
-- ARGV[2]  the lock's wake channel.
--
-- Replies:
--    1  downgraded.
--    0  the hold is gone (its lease ran out).
--   -1  the hold is a read hold already (1 where a script may run twice: see RETRIED in
--       lock.lua).
-- Errors (nothing written):
--   WRONGTYPE <key> ...  KEYS[1] is not a lock of holds (another type, or a hash that is
--                        not one), or a queue key holds another type.

local key, hold = KEYS[1], ARGV[1]
local wrong, now, state, mine = holds_find(KEYS, hold)
if wrong then
  return wrong
end
if not mine then
  return 0
end
if mine.mode ~= 'w' then
  -- A second run of a downgrade (a cluster client's retry) finds the read hold the first
  -- made: the caller asks only for its write holds.
  if RETRIED then
    return 1
  end
  return -1
end
redis.call('HSET', key, 'h:' .. hold, hold_value(mine.deadline, 'r', mine.token, mine.owner))
state.writes = state.writes - 1
if state.writes == 0 then
  redis.call('HDEL', key, 'writer', 'token')
  queue_purge(KEYS[2], KEYS[3], now)
  wake_front(KEYS[2], ARGV[2], state)
end
return 1
