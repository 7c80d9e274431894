-- release.lua: release several locks of one slot taken together, each only if it is still
-- ARGV[1]'s, and wake their waiters (after the prelude waiters.lua: holder_of, wake,
-- wake_all, queue_head, the tombstone).
--
-- KEYS[3i-2], KEYS[3i-1], KEYS[3i]  the i-th lock key, its fencing counter and its queue
--          (as acquire.lua).
-- KEYS[3n+1]  optional: ARGV[1]'s tombstone key, where the client may run a script twice
--          (see tombstone in waiters.lua).
-- ARGV[1]  the owner token.
-- ARGV[i+1]  the i-th lock's wake channel. A released lock that was marked wakes the first
--          waiter in its queue (a Mutex's or FairMutex's line), if any, and publishes '*'
--          (every waiter not in line, a MultiLock's, looks again).
--
-- Reply: {r_1, ..., r_n}, for each lock: 1 released; 0 the key is gone (its lease ran out);
--   -1 it holds another owner's token (left untouched). Every lock still ARGV[1]'s is
--   released, whatever the others say. A second run of a release that released any lock (a
--   cluster client's retry) gives all 1 again, for RELEASED_MS (released_before).
-- Errors:
--   WRONGTYPE <key> ...  a lock key holds another Redis type (nothing written).

local owner = ARGV[1]
local count = math.floor(#KEYS / 3)
for i = 1, count do
  local wrong = wrong_kind(KEYS[3 * i - 2], 'string', 'a lock')
  if wrong then
    return wrong
  end
end
local reply, any = {}, false
for i = 1, count do
  local lock, queue, channel = KEYS[3 * i - 2], KEYS[3 * i], ARGV[i + 1]
  local holder, marked = holder_of(lock)
  if holder == owner then
    redis.call('DEL', lock)
    if marked then
      local head = redis.call('TYPE', queue).ok == 'zset' and queue_head(queue)
      if head then
        wake(channel, head)
      end
      wake_all(channel)
    end
    reply[i] = 1
    any = true
  elseif holder then
    reply[i] = -1
  else
    reply[i] = 0
  end
end
if any then
  remember_release(1)
elseif released_before() then
  for i = 1, count do
    reply[i] = 1
  end
end
return reply
