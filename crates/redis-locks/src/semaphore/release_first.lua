-- release_first.lua: the common cases of release.lua, put before the preludes so that they
-- cost no more than they must (as few calls to the server as they can): a permit kept as a
-- plain key by ARGV[1] (see permits.lua), or permits of ARGV[1] in the hash whose lease has
-- not ended, with no 'waiting' mark, so nobody waits in line to be woken. KEYS and ARGV as
-- release.lua.
--
-- Replies:
--   1  released (release.lua's reply 1). A permit kept as a plain key: the key held
--      '<ARGV[1]> <N>', so its lease had not ended (the key expires with it), and nobody
--      waits (a waiter's script turns the key into the hash first); the key is gone. In the
--      hash: the holder is gone and 'used' is less by its permits. The last holder ('used'
--      counts no other: it is never less than the truth, so nobody else is in the hash)
--      deletes the hash.
-- Falls through to release.lua, having written nothing, for every other case (including a
-- key of another type: its HMGET error is caught here, and release.lua says what the key is).

do
  -- A GET that fails on the hash costs its releases a call: the plain key's release is the
  -- one this path is for (nobody else holds or waits).
  local plain = redis.pcall('GET', KEYS[1])
  if type(plain) == 'string' and string.match(plain, '^(%S+) %d+$') == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return 1
  end
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
