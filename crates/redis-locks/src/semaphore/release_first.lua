-- release_first.lua: the common case of release.lua, put before the preludes so that it
-- costs no more than it must (as few calls to the server as it can): ARGV[1] holds permits
-- whose lease has not ended, and the hash has no 'waiting' mark, so nobody waits in line to
-- be woken (see permits.lua). KEYS and ARGV as release.lua.
--
-- Replies:
--   1  released (release.lua's reply 1): the holder is gone and 'used' is less by its
--      permits. The last holder ('used' counts no other: it is never less than the truth, so
--      nobody else is in the hash) deletes the hash.
-- Falls through to release.lua, having written nothing, for every other case (including a
-- key of another type: its HMGET error is caught here, and release.lua says what the key is).

do
  local state = redis.pcall('HMGET', KEYS[1], ARGV[1], 'used', 'waiting')
  if not state.err and state[1] and state[2] and not state[3] then
    local deadline, count = string.match(state[1], '^(%d+) (%d+)$')
    local clock = redis.call('TIME')
    local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
    if deadline and tonumber(deadline) > now then
      local used, mine = tonumber(state[2]), tonumber(count)
      if used and used <= mine then
        redis.call('DEL', KEYS[1])
        return 1
      elseif used then
        redis.call('HDEL', KEYS[1], ARGV[1])
        redis.call('HSET', KEYS[1], 'used', used - mine)
        return 1
      end
    end
  end
end
