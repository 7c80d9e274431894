-- release_first.lua: the common case of release.lua, put before the preludes so that it
-- costs no more than it must: ARGV[1] holds permits whose lease has not ended, and nobody
-- waits in line, so nobody is woken. KEYS and ARGV as release.lua.
--
-- Replies:
--   1  released (release.lua's reply 1): the holder and its count are gone, 'used' is less
--      by its permits; with the last holder gone, the hash goes too.
-- Falls through to release.lua, having written nothing, for every other case.

do
  local ends = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
  if type(ends) == 'string' and redis.call('EXISTS', KEYS[3]) == 0 then
    local clock = redis.call('TIME')
    local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
    local counts = redis.pcall('HMGET', KEYS[2], ARGV[1], 'used')
    if tonumber(ends) > now and not counts.err and counts[1] and counts[2] then
      redis.call('ZREM', KEYS[1], ARGV[1])
      redis.call('HDEL', KEYS[2], ARGV[1])
      if redis.call('HINCRBY', KEYS[2], 'used', -tonumber(counts[1])) <= 0 and
          redis.call('EXISTS', KEYS[1]) == 0 then
        redis.call('DEL', KEYS[2])
      end
      return 1
    end
  end
end
