-- acquire_first.lua: the common case of acquire.lua, put before the preludes so that it
-- costs no more than it must (every call to the server from a script costs about half a
-- microsecond, so it makes as few as it can): nobody waits in line, N matches, and the
-- permits the hash counts as used ('used', never less than the truth: see permits.lua)
-- leave room for ARGV[2] more. KEYS and ARGV as acquire.lua.
--
-- Replies:
--   {1, token}  granted, as acquire.lua's: the fencing token is next_token's (max(counter + 1,
--               the server clock in µs)), the holder's lease ends at now + ARGV[4], and the
--               holders key and the hash last at least that long.
-- Falls through to acquire.lua, having written nothing (or undone what it wrote), for every
-- other case: a line, a mismatched N, too few permits counted free, the owner holding already
-- (a re-grant), a key of another type, a counter that is not an integer.

do
  local state = redis.pcall('HMGET', KEYS[2], 'limit', 'used')
  if not state.err then
    local limit, used = tonumber(state[1]), tonumber(state[2])
    local wanted, asked = tonumber(ARGV[2]), tonumber(ARGV[3])
    -- Without the hash, a new semaphore: no holder and no waiter may be there either (the
    -- hash outlives both). With it, the same N and room in its count, and nobody in line.
    local fresh = limit == nil and used == nil
    local fits
    if fresh then
      fits = wanted <= asked and redis.call('EXISTS', KEYS[1], KEYS[4]) == 0
    else
      fits = limit == asked and used ~= nil and used + wanted <= asked and
        redis.call('EXISTS', KEYS[4]) == 0
    end
    if fits then
      local clock = redis.call('TIME')
      local micros = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
      local lease = tonumber(ARGV[4])
      -- The first write; an owner that holds already (a re-grant) and a holders key of
      -- another type fall through.
      if redis.pcall('ZADD', KEYS[1], 'NX', math.floor(micros / 1000) + lease, ARGV[1]) == 1 then
        local token = redis.pcall('INCR', KEYS[3])
        if type(token) == 'number' then
          if micros > token then
            token = micros
            redis.call('SET', KEYS[3], token)
          end
          redis.call('HSET', KEYS[2], ARGV[1], wanted, 'limit', asked, 'used', (used or 0) + wanted)
          -- Both keys last at least as long as the new lease: set on new keys, raised on
          -- others (GT leaves a key without expiry alone, so such a key, never left by these
          -- scripts, gets one here too).
          for key = 1, 2 do
            if fresh or (redis.call('PEXPIRE', KEYS[key], lease, 'GT') == 0 and
                redis.call('PTTL', KEYS[key]) == -1) then
              redis.call('PEXPIRE', KEYS[key], lease)
            end
          end
          return {1, token}
        end
        -- A counter of another type, or not an integer: undone, and acquire.lua says so.
        redis.call('ZREM', KEYS[1], ARGV[1])
      end
    end
  end
end
