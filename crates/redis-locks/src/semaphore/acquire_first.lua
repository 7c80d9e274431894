-- acquire_first.lua: the common case of acquire.lua, put before the preludes so that it
-- costs no more than it must (every call to the server from a script costs about half a
-- microsecond, so it makes as few as it can): nobody waits in line (no 'waiting' mark), N
-- matches, the caller holds nothing yet, and the permits the hash counts as used ('used',
-- never less than the truth: see permits.lua) leave room for ARGV[2] more. KEYS and ARGV as
-- acquire.lua; it records no epoch (KEYS[6], ARGV[7]: a re-grant of a permit kept as a plain
-- key records it, and such a key makes the HMGET below fail, so that falls through; a fresh
-- grant here only leaves the connection's next first attempt to the script).
--
-- Replies:
--   {1, token}  granted, as acquire.lua's: the fencing token is next_token's (max(counter + 1,
--               the server clock in µs)), the holder's lease ends at now + ARGV[4], and the
--               hash lasts at least that long.
-- Falls through to acquire.lua, having written nothing (or undone what it wrote), for every
-- other case: a line, a mismatched N, too few permits counted free, the owner holding already
-- (a re-grant), a key of another type, a counter that is not an integer, an expiry the user
-- may not set (acquire.lua then says so before it writes: no key is left without a TTL).

do
  local state = redis.pcall('HMGET', KEYS[1], 'limit', 'used', 'waiting', ARGV[1])
  if not state.err and not state[3] and not state[4] then
    local wanted, asked = tonumber(ARGV[2]), tonumber(ARGV[3])
    local used = tonumber(state[2])
    -- Without 'limit', a new semaphore if neither the key nor a line is there (a line
    -- outlives the hash when `break` deleted it: its waiters go first, by the slow path);
    -- with it, the same N and room in the count.
    local fresh = not state[1]
    local fits
    if fresh then
      fits = wanted <= asked and redis.call('EXISTS', KEYS[1], KEYS[3]) == 0
    else
      fits = state[1] == ARGV[3] and used ~= nil and used + wanted <= asked
    end
    if fits then
      local clock = redis.call('TIME')
      local text = clock[1] .. string.sub('00000' .. clock[2], -6)
      local micros = tonumber(text)
      local token = redis.pcall('INCR', KEYS[2])
      if type(token) == 'number' then
        if micros > token then
          token = micros
          redis.call('SET', KEYS[2], text)
        end
        -- The deadline as text made once: a number sent to the server is printed with
        -- %.17g on every call.
        local deadline = string.format('%d', math.floor(micros / 1000) + tonumber(ARGV[4]))
        local holder = deadline .. ' ' .. ARGV[2]
        -- The hash lasts at least as long as the new lease: set on a new hash, raised on
        -- another, never lowered (GT leaves a key without expiry alone, so such a key, never
        -- left by these scripts, gets one here too).
        local set
        if fresh then
          redis.call('HSET', KEYS[1], ARGV[1], holder, 'used', ARGV[2], 'limit', ARGV[3])
          set = redis.pcall('PEXPIRE', KEYS[1], ARGV[4])
        else
          redis.call('HSET', KEYS[1], ARGV[1], holder, 'used', used + wanted)
          set = redis.pcall('PEXPIRE', KEYS[1], ARGV[4], 'GT')
          if set == 0 and redis.call('PTTL', KEYS[1]) == -1 then
            set = redis.pcall('PEXPIRE', KEYS[1], ARGV[4])
          end
        end
        if type(set) == 'number' then
          return {1, token}
        end
        -- Refused: undone, and acquire.lua says why before it writes anything.
        if fresh then
          redis.call('DEL', KEYS[1])
        else
          redis.call('HDEL', KEYS[1], ARGV[1])
          redis.call('HSET', KEYS[1], 'used', state[2])
        end
      end
    end
  end
end
