-- fence.lua: the shared prelude of every script that hands out fencing tokens; it is put in
-- front of engine/string_lock/acquire.lua, fair/acquire.lua and engine/holds/acquire.lua, and of the inspect
-- scripts (read_counter). It defines four functions and runs nothing by itself.
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
