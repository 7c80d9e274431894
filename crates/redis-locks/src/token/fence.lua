-- fence.lua: the shared prelude of every script that hands out fencing tokens; it is put in
-- front of engine/string_lock/acquire.lua, fair/acquire.lua, engine/holds/acquire.lua and
-- semaphore/acquire.lua, and of the inspect scripts (read_counter). It defines six functions
-- and runs nothing by itself.
--
-- server_micros()
--   Returns  the server's clock in µs (TIME). A script reads it before it writes anything,
--            so a TIME the ACL refuses leaves nothing behind.
--
-- server_clock()
--   Returns  server_micros() and the same number as decimal text, made from TIME's two
--            replies without a number format (a fast path passes the text on: a 16-digit
--            number a script sends to the server is printed with %.17g first, which costs
--            about as much as the call).
--
-- next_token(counter, micros, text)
--   counter  the name of a fencing counter: a string holding an integer, or absent.
--   micros   server_micros(), read at the start of the script.
--   text     optional: micros as decimal text (server_clock()), written as it is when the
--            clock is the token.
--   Returns  the next fencing token, max(counter + 1, the server's clock in µs), and stores
--            it in the counter. So a counter that came back old (a restart from an older
--            RDB snapshot, an AOF that lost its last second, a failover to a replica that
--            lagged) is never used as it is: the clock has moved past every token handed
--            out before (the clock assumptions are in the crate README, "Fencing tokens").
--            A counter ahead of the clock (more than one grant per µs) steps by one.
--   On error it returns nil and an error reply, having written nothing:
--            'WRONGTYPE <counter> ...' when the counter is not a string or not an integer;
--            any other error (NOPERM, OOM, READONLY) as the server raised it.
--
-- read_counter(counter)
--   Returns  the counter's value (0 when absent), or nil and a 'WRONGTYPE <counter> ...'
--            error reply when it is not an integer (or not a string). Writes nothing.
--
-- The counter's epochs vouch for it on a connection (engine/string_lock/acquire.lua, KEYS[3],
-- says how): a sorted set of connection names, each scored with the server time (ms) at which
-- a script brought the counter up to the server clock on that connection. A fast attempt that
-- finds its connection's name there trusts its pipelined INCR.
--
-- epochs_wrong_type(epochs)
--   Returns  nil when epochs is a sorted set or absent, else a 'WRONGTYPE <epochs> ...' error
--            reply. Asked before a script writes anything.
--
-- epochs_record(epochs, name, ms)
--   Records name at ms (after a grant numbered by next_token on that connection). Names older
--   than an hour are dropped, and all but the 1024 newest (a dropped name only costs its
--   connection a script call); the set expires an hour after its last write.

local function server_micros()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000000 + tonumber(now[2])
end

local function server_clock()
  local now = redis.call('TIME')
  local text = now[1] .. string.sub('00000' .. now[2], -6)
  return tonumber(text), text
end

local function next_token(counter, micros, text)
  local token = redis.pcall('INCR', counter)
  if type(token) == 'table' then
    local err = token.err or ''
    if string.sub(err, 1, 4) == 'ERR ' or string.sub(err, 1, 10) == 'WRONGTYPE ' then
      return nil, redis.error_reply('WRONGTYPE ' .. counter .. ' is not a fencing counter: ' .. err)
    end
    return nil, redis.error_reply(err)
  end
  if micros > token then
    token = micros
    redis.call('SET', counter, text or token)
  end
  return token
end

local function epochs_wrong_type(epochs)
  local kind = redis.call('TYPE', epochs).ok
  if kind ~= 'none' and kind ~= 'zset' then
    return redis.error_reply('WRONGTYPE ' .. epochs .. ' holds a ' .. kind .. ', not epochs')
  end
  return nil
end

local function epochs_record(epochs, name, ms)
  redis.call('ZADD', epochs, ms, name)
  redis.call('ZREMRANGEBYSCORE', epochs, '-inf', ms - 3600000)
  redis.call('ZREMRANGEBYRANK', epochs, 0, -1025)
  redis.call('PEXPIRE', epochs, 3600000)
end

local function read_counter(counter)
  local value = redis.pcall('GET', counter)
  if type(value) == 'table' and value.err then
    return nil, redis.error_reply('WRONGTYPE ' .. counter .. ' is not a fencing counter: ' .. value.err)
  end
  if not value then
    return 0
  end
  local number = tonumber(value)
  if not number then
    return nil, redis.error_reply('WRONGTYPE ' .. counter .. ' is not a fencing counter: not an integer')
  end
  return number
end
