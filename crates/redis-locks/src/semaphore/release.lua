-- release.lua: give a semaphore's permits back, or give up a place in its queue, and wake
-- the first waiter if permits are free (after the preludes lock.lua, queue.lua and
-- permits.lua).
--
-- KEYS[1]  the semaphore: its hash, or a permit kept as a plain key (see permits.lua).
-- KEYS[2]  the queue.
-- KEYS[3]  the places.
-- KEYS[4]  the ticket counter.
-- KEYS[5]  optional: ARGV[1]'s tombstone key, where the client may run a script twice (see
--          tombstone in lock.lua).
-- ARGV[1]  the owner token of the holder, or of the waiter giving up.
-- ARGV[2]  the wake channel.
--
-- Replies:
--    1  released: ARGV[1] held permits (its lease had not ended), and they are free now.
--    0  ARGV[1] holds no permits: its lease ended (the permits came back then), or it was
--       only waiting, or never anything. Any place it had in the queue is given up.
-- A second run of a release that gave 1 (a cluster client's retry) gives 1 again (see
-- released_before in lock.lua). Permits have no "taken" state: never -1.
-- Errors (nothing written):
--   WRONGTYPE <key> ...  a key holds another Redis type, or a hash that is no semaphore's.
--   NOPERM ...           the user may not run PEXPIRE (asked before anything is written).

local owner, channel = ARGV[1], ARGV[2]
local now = server_ms()
local state, wrong = permits_open(KEYS[1], KEYS[2], KEYS[3], KEYS[4], now)
if not state then
  return wrong
end
queue_leave(KEYS[2], KEYS[3], KEYS[4], owner)
local result = 0
local held = state.holders[owner]
if held then
  state.holders[owner] = nil
  state.used = state.used - held.count
  redis.call('HDEL', KEYS[1], owner)
  permits_write(KEYS[1], state)
  remember_release(1)
  result = 1
elseif released_before() then
  return 1
end
local head = queue_head(KEYS[2])
if head and state.limit and state.used < state.limit then
  wake(channel, head)
end
permits_keep(KEYS[1], KEYS[2], state, now)
return result
