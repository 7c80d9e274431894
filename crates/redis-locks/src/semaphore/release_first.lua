-- release_first.lua: the common case of release.lua, put before the preludes so that it
-- costs no more than it must (as few calls to the server as it can): ARGV[1] holds permits
-- whose lease has not ended, and nobody waits in line, so nobody is woken. KEYS and ARGV as
-- release.lua.
--
-- Replies:
--   1  released (release.lua's reply 1): the holder and its count are gone, 'used' is less
--      by its permits. The last holder ('used' counts no other: it is never less than the
--      truth, so nobody else is in the holders key) deletes both keys at once.
-- Falls through to release.lua, having written nothing, for every other case.

do
  local ends = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
  if type(ends) == 'string' then
    local counts = redis.pcall('HMGET', KEYS[2], ARGV[1], 'used')
    if not counts.err and counts[1] and counts[2] and redis.call('EXISTS', KEYS[3]) == 0 then
      local clock = redis.call('TIME')
      local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
      local mine, used = tonumber(counts[1]), tonumber(counts[2])
      if tonumber(ends) > now and mine and used then
        if used <= mine then
          redis.call('DEL', KEYS[1], KEYS[2])
        else
          redis.call('ZREM', KEYS[1], ARGV[1])
          redis.call('HDEL', KEYS[2], ARGV[1])
          redis.call('HINCRBY', KEYS[2], 'used', -mine)
        end
        return 1
      end
    end
  end
end
