-- mutex_acquire.lua: take a Mutex if it is free, and number the acquisition. The waiting
-- path calls it (a waiter marks the lock so its release wakes it); the first, fast attempt
-- of a `lock` sends `SET NX PX` + `INCR` instead and calls this script only for what the
-- pipeline cannot decide alone: a grant whose reply came back after its lease, a counter
-- this server has not vouched for since it last started or was promoted (see KEYS[3]), a
-- held key without expiry.
--
-- KEYS[1]  the lock key: a string holding the owner token while the lock is held, with
--          '+w' appended once a waiter has marked it (see "Replies").
-- KEYS[2]  the fencing counter: an integer that only grows and never expires.
-- KEYS[3]  the counter's epoch: the name of the client connection (CLIENT SETNAME, a random
--          'redis-locks:<hex>' nonce) on which this script last brought the counter up to
--          the server clock. Connection names live only as long as their connection, and so
--          never survive a restart or move to another server, while this key does (RDB, AOF,
--          replication). The fast attempt trusts its INCR only when KEYS[3] equals the name
--          of the connection it was sent on: then the counter was brought up to the clock by
--          this very server process since it last started, and every token handed out since
--          came from it. It expires after an hour (an idle lock name then costs only its
--          counter); a missing epoch only sends the next fast grant through this script.
-- ARGV[1]  the owner token of this acquisition (32 lowercase hex characters).
-- ARGV[2]  the lease in milliseconds (a positive integer).
-- ARGV[3]  optional; '1' marks the lock at once when granted (its value is ARGV[1] .. '+w'):
--          the caller has waiters of its own queued behind it, which then need not ask
--          Redis to be woken by its release.
-- ARGV[4]  optional; the name of the connection this script runs on: on a grant, written
--          to KEYS[3] with a one-hour expiry. '' or absent leaves KEYS[3] alone.
--
-- Tokens: every grant here takes max(counter + 1, server clock in µs) and stores it. A
-- counter that came back old (a restart from an older RDB snapshot, an AOF that lost its
-- last second, a failover to a replica that lagged) is therefore never reused: the clock has
-- moved past every token handed out before (the clock assumption is written out in the
-- crate README, "Fencing tokens").
--
-- Replies:
--   {1, token}  acquired; token is the new fencing token. Also the reply when KEYS[1]
--               already holds ARGV[1] (a grant by the fast attempt, or a retried request):
--               the lease is set again and the grant takes a new token as above.
--   {0, pttl}   held by another owner; pttl is its remaining lease in milliseconds,
--               or -1 if the key has no expiry (it was not written by this library).
--               A key with a lease is marked: '+w' is appended to its value (its TTL
--               stays), so its release publishes a wake-up, which it skips while nobody
--               waits. A key without expiry is not ours and is left untouched.
-- Errors (a grant is taken back, so no lock is left held; the message names the key):
--   WRONGTYPE <key> ...  KEYS[1] is not a string, or KEYS[2] is not a string, or KEYS[2] is
--                        a string that is not an integer (then, in the re-grant branch,
--                        the caller's own key keeps its old lease: the caller releases it).

-- The next fencing token: the counter plus one, or the server clock in µs if that is more.
-- Returns nil and an error reply when the counter is not an integer.
local function next_token()
  local token = redis.pcall('INCR', KEYS[2])
  if type(token) == 'table' then
    return nil, redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' is not a fencing counter: ' ..
      (token.err or 'not an integer'))
  end
  local now = redis.call('TIME')
  local micros = tonumber(now[1]) * 1000000 + tonumber(now[2])
  if micros > token then
    token = micros
    redis.call('SET', KEYS[2], token)
  end
  if ARGV[4] and ARGV[4] ~= '' then
    redis.call('SET', KEYS[3], ARGV[4], 'EX', 3600)
  end
  return token
end

local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'string' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a lock')
end

-- The common case first: the lock is free. SET NX PX writes the key with its lease at once.
local value = ARGV[1]
if ARGV[3] == '1' then
  value = value .. '+w'
end
if redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
  local token, err = next_token()
  if not token then
    -- A broken counter: take the lock back, so the error leaves nothing behind.
    redis.call('DEL', KEYS[1])
    return err
  end
  return {1, token}
end

local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] or holder == ARGV[1] .. '+w' then
  local token, err = next_token()
  if not token then
    return err
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl >= 0 and string.sub(holder, -2) ~= '+w' then
  redis.call('APPEND', KEYS[1], '+w')
end
return {0, pttl}
