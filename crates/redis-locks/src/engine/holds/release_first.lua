-- release_first.lua: the common case of release.lua, put before the preludes so that it
-- costs no more than it must: the caller's hold is the lock's only hold, its lease has not
-- run out, and nobody waits (the queue is absent). KEYS and ARGV as release.lua.
--
-- Replies:
--   {1, 0}  released: the lock key is deleted (release.lua's reply when the owner has no
--           more holds; nobody waited, so nothing is published).
-- Falls through to release.lua for every other case (including a key of another type: its
-- HGET error is caught here, and release.lua says what the key is).

local value = redis.pcall('HGET', KEYS[1], 'h:' .. ARGV[1])
if type(value) == 'string' and redis.call('EXISTS', KEYS[2]) == 0 then
  local deadline, mode = string.match(value, '^(%d+) ([rw]) ')
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  -- The hold's own field, plus 'kind' (and 'writer' and 'token' for a write hold).
  local alone = (mode == 'r' and 2) or 4
  if deadline and tonumber(deadline) > now and redis.call('HLEN', KEYS[1]) == alone then
    redis.call('DEL', KEYS[1])
    return {1, 0}
  end
end
