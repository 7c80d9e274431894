-- lines.lua: the MultiLock's prelude (after lock.lua and queue.lua): its KEYS, and its
-- place in the lines of waiters of its locks. It defines functions and runs nothing by itself.
--
-- Every MultiLock script takes, per lock i (i = 1 .. locks()), five KEYS: the lock key (a
-- Mutex's: a string holding the owner token, with the mark '+w' when marked), its fencing
-- counter, and its line of waiters (queue, places, tickets: see queue.lua), which a Mutex, a
-- FairMutex and a MultiLock of the same name share. A MultiLock waits in the line of the one
-- lock that refused it, and in no other.
--
-- locks()
--   How many locks the KEYS name (a tombstone key after them is not counted).
--
-- lock_key(i, k)
--   The k-th KEY of lock i: 1 the lock key, 2 the fencing counter, 3 the queue, 4 the places,
--   5 the ticket counter.
--
-- lines_wrong_type(count)
--   A 'WRONGTYPE <key> ...' error reply when a key of one of the first count locks holds
--   another type than it should, else nil.
--
-- line_leave(i, id, channel)
--   Takes id out of lock i's line (nothing if it has no place there); when id was first in
--   line and the lock is free, the next waiter is woken on channel, since the release that
--   woke id may have been meant for it.

local function locks()
  return math.floor(#KEYS / 5)
end

local function lock_key(i, k)
  return KEYS[5 * (i - 1) + k]
end

local function lines_wrong_type(count)
  local kinds = {'string', 'string', 'zset', 'zset', 'string'}
  local what = {'a lock', 'a fencing counter', 'a queue', 'a queue', 'a queue'}
  for i = 1, count do
    for k = 1, 5 do
      local wrong = wrong_kind(lock_key(i, k), kinds[k], what[k])
      if wrong then
        return wrong
      end
    end
  end
  return nil
end

local function line_leave(i, id, channel)
  local queue = lock_key(i, 3)
  if not redis.call('ZSCORE', queue, id) then
    return
  end
  local first = queue_head(queue) == id
  queue_leave(queue, lock_key(i, 4), lock_key(i, 5), id)
  if first and not holder_of(lock_key(i, 1)) then
    local next = queue_head(queue)
    if next then
      wake(channel, next)
    end
  end
end
