-- mutex_acquire.lua: take a Mutex if it is free, and number the acquisition.
--
-- KEYS[1]  the lock key: a string holding the owner token while the lock is held.
-- KEYS[2]  the fencing counter: an integer that only grows and never expires.
-- ARGV[1]  the owner token of this acquisition (32 lowercase hex characters).
-- ARGV[2]  the lease in milliseconds (a positive integer).
--
-- Replies:
--   {1, token}  acquired. token is the new fencing token, the counter after INCR.
--               A counter that did not exist (first use, or lost in a restart without
--               persistence) starts at the server clock in microseconds, so tokens keep
--               growing across such a loss. Also the reply when KEYS[1] already holds
--               ARGV[1] (a retry of a request whose first try was granted): the lease is
--               set again and the token is the current counter, not a new one.
--   {0, pttl}   held by another owner; pttl is its remaining lease in milliseconds,
--               or -1 if the key has no expiry (it was not written by this library).
-- Errors (nothing is left written):
--   WRONGTYPE   KEYS[1] is not a string (raised by GET), or KEYS[2] is not a string (INCR).
--   ERR ...     KEYS[2] is a string that is not an integer (raised by INCR).

-- The common case first: the lock is free. SET NX PX writes the key with its lease at once.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local token = redis.pcall('INCR', KEYS[2])
  if type(token) == 'table' and token.err then
    -- A broken counter: take the lock back, so the error leaves nothing behind.
    redis.call('DEL', KEYS[1])
    return token
  end
  if token == 1 then
    local now = redis.call('TIME')
    token = tonumber(now[1]) * 1000000 + tonumber(now[2])
    redis.call('SET', KEYS[2], token)
  end
  return {1, token}
end

local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
return {0, redis.call('PTTL', KEYS[1])}
