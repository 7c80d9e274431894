-- acquire_first.lua: the common case of acquire.lua, put before the preludes so that it
-- costs no more than it must (a script defines every prelude function on every call): nobody
-- waits in line, N matches, and the permits the hash counts as used ('used', never less than
-- the truth: see permits.lua) leave room for ARGV[2] more. KEYS and ARGV as acquire.lua.
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
  -- A holders key of another type fails ZCARD (and then acquire.lua says so).
  local held = redis.pcall('ZCARD', KEYS[1])
  if not state.err and type(held) == 'number' then
    local limit, used = tonumber(state[1]), tonumber(state[2])
    local wanted, asked = tonumber(ARGV[2]), tonumber(ARGV[3])
    -- Without the hash (a new semaphore), no holder may be there.
    local fits = (limit == asked and used and used + wanted <= asked) or
      (limit == nil and held == 0 and wanted <= asked)
    if fits and redis.call('EXISTS', KEYS[4]) == 0 then
      local clock = redis.call('TIME')
      local micros = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
      local lease = tonumber(ARGV[4])
      -- The first write; an owner that holds already (a re-grant) falls through.
      if redis.call('ZADD', KEYS[1], 'NX', math.floor(micros / 1000) + lease, ARGV[1]) == 1 then
        local token = redis.pcall('INCR', KEYS[3])
        if type(token) == 'number' then
          if micros > token then
            token = micros
            redis.call('SET', KEYS[3], token)
          end
          redis.call('HSET', KEYS[2], ARGV[1], wanted, 'limit', asked, 'used', (used or 0) + wanted)
          -- The hash lasts as long as the holders key (nobody waits): both to the new lease
          -- when it ends later than the holders key would.
          if redis.call('PTTL', KEYS[1]) < lease then
            redis.call('PEXPIRE', KEYS[1], lease)
            redis.call('PEXPIRE', KEYS[2], lease)
          end
          return {1, token}
        end
        -- A counter of another type, or not an integer: undone, and acquire.lua says so.
        redis.call('ZREM', KEYS[1], ARGV[1])
      end
    end
  end
end
