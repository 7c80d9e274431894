-- mutex_acquire.lua: take a Mutex if it is free, and number the acquisition. The waiting
-- path calls it (a waiter marks the lock so its release wakes it); the first, fast attempt
-- of a `lock` sends `SET NX PX` + `INCR` instead and calls this script only for what the
-- pipeline cannot decide alone: a grant whose reply came back after its lease, a counter
-- that still needs its clock seed (see below), a held key without expiry.
--
-- KEYS[1]  the lock key: a string holding the owner token while the lock is held, with
--          '+w' appended once a waiter has marked it (see "Replies").
-- KEYS[2]  the fencing counter: an integer that only grows and never expires.
-- ARGV[1]  the owner token of this acquisition (32 lowercase hex characters).
-- ARGV[2]  the lease in milliseconds (a positive integer).
-- ARGV[3]  optional; '1' marks the lock at once when granted (its value is ARGV[1] .. '+w'):
--          the caller has waiters of its own queued behind it, which then need not ask
--          Redis to be woken by its release.
--
-- Replies:
--   {1, token}  acquired. token is the new fencing token, the counter after INCR.
--               A counter below 10^15 (missing: first use, or lost in a restart without
--               persistence) jumps to the server clock in microseconds, so tokens keep
--               growing across such a loss. Also the reply when KEYS[1] already holds
--               ARGV[1] (a grant by the fast attempt, or a retried request): the lease is
--               set again and the token is the current counter (seeded if below 10^15),
--               not a new one.
--   {0, pttl}   held by another owner; pttl is its remaining lease in milliseconds,
--               or -1 if the key has no expiry (it was not written by this library).
--               A key with a lease is marked: '+w' is appended to its value (its TTL
--               stays), so its release publishes a wake-up, which it skips while nobody
--               waits. A key without expiry is not ours and is left untouched.
-- Errors (a grant is taken back, so no lock is left held):
--   WRONGTYPE   KEYS[1] is not a string (raised by GET), or KEYS[2] is not a string (INCR).
--   ERR ...     KEYS[2] is a string that is not an integer (raised by INCR; or in the
--               re-grant branch, after the lease of the caller's own key was set again: the
--               caller then releases it).

local SEEDED = 1000000000000000

-- A counter below 10^15 was never seeded from the clock: move it to the clock.
local function seeded(token)
  if token < SEEDED then
    local now = redis.call('TIME')
    local micros = tonumber(now[1]) * 1000000 + tonumber(now[2])
    if micros > token then
      token = micros
      redis.call('SET', KEYS[2], token)
    end
  end
  return token
end

-- The common case first: the lock is free. SET NX PX writes the key with its lease at once.
local value = ARGV[1]
if ARGV[3] == '1' then
  value = value .. '+w'
end
if redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
  local token = redis.pcall('INCR', KEYS[2])
  if type(token) == 'table' and token.err then
    -- A broken counter: take the lock back, so the error leaves nothing behind.
    redis.call('DEL', KEYS[1])
    return token
  end
  return {1, seeded(token)}
end

local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] or holder == ARGV[1] .. '+w' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local counter = redis.call('GET', KEYS[2])
  local token = tonumber(counter or '0')
  if not token then
    return redis.error_reply('ERR fencing counter ' .. KEYS[2] .. ' is not an integer')
  end
  return {1, seeded(token)}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl >= 0 and string.sub(holder, -2) ~= '+w' then
  redis.call('APPEND', KEYS[1], '+w')
end
return {0, pttl}
