-- release.lua: release several locks of one slot taken together, each only if it is still
-- ARGV[1]'s, leave every line of theirs ARGV[1] stands in, and wake their waiters (after the
-- preludes lock.lua: holder_of, wake, wake_all, server_ms, the tombstone; queue.lua;
-- lines.lua).
--
-- KEYS     per lock, five (see lines.lua); then, optionally, ARGV[1]'s tombstone key, where
--          the client may run a script twice (see tombstone in lock.lua).
-- ARGV[1]  the owner token.
-- ARGV[1+i]  lock i's wake channel. A lock released (or left free by ARGV[1] leaving the head
--          of its line) wakes the first waiter in its line; a released lock that was marked
--          with nobody in line publishes '*' (a waiter of another kind looks again).
--
-- Reply: {r_1, ..., r_n}, for each lock: 1 released; 0 the key is gone (its lease ran out, or
--   ARGV[1] only waited); -1 it holds another owner's token (left untouched). Every lock
--   still ARGV[1]'s is released, whatever the others say. A second run of a release that
--   released any lock (a cluster client's retry) gives all 1 again, for RELEASED_MS
--   (released_before).
-- Errors (nothing written):
--   WRONGTYPE <key> ...  a key holds another Redis type.

local owner = ARGV[1]
local count = locks()
local wrong = lines_wrong_type(count)
if wrong then
  return wrong
end
local now = server_ms()
local reply, any = {}, false
for i = 1, count do
  local lock, queue, channel = lock_key(i, 1), lock_key(i, 3), ARGV[1 + i]
  queue_purge(queue, lock_key(i, 4), now)
  line_leave(i, owner, channel)
  local holder, marked = holder_of(lock)
  if holder == owner then
    redis.call('DEL', lock)
    local first = queue_head(queue)
    if first then
      wake(channel, first)
    elseif marked then
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
