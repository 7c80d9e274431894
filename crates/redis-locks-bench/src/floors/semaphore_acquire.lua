-- semaphore_acquire.lua: the least a leased, fenced permit counted by a script must send to
-- be taken, the floor `bench throughput --kind semaphore` measures the library's Semaphore
-- against. Not a semaphore: no weights, no agreement on N between the handles (N comes with
-- each call), no waiting line, no restart-proof seed of the fencing counter; only what a
-- semaphore that counts its holders in one script (counting them and adding one atomically)
-- runs at the least. Its release is the plain `ZREM holders owner`, which removes only that
-- owner's entry. The library's Semaphore takes a single permit nobody contends for without a
-- script at all (a plain key, SET NX PX: see semaphore/first.rs), so it may beat this floor.
--
-- KEYS[1]  the holders: a sorted set of owner tokens scored by their lease's deadline (ms,
--          server clock).
-- KEYS[2]  the fencing counter.
-- ARGV[1]  the owner token.
-- ARGV[2]  N, the permits.
-- ARGV[3]  the lease in milliseconds.
--
-- Replies:
--   token  granted: the new fencing token (INCR of KEYS[2]); ARGV[1] is among the holders
--          until now + lease, and the set's TTL is the lease (every lease is the same length,
--          so the set lives as long as its last holder's).
--   0      refused: N unexpired holders already.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return redis.call('INCR', KEYS[2])
