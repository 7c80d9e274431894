-- write.lua: write the checked resource, refusing a holder whose fencing token is stale,
-- and log every accepted write.
--
-- KEYS[1]  the resource: a hash {value = integer, token = highest fencing token seen}.
-- KEYS[2]  the log of accepted writes: a list of the writers' tokens, oldest first.
-- ARGV[1]  the writer's fencing token (0 for an algorithm without tokens).
-- ARGV[2]  the value to write (an integer: what the holder read, plus one).
--
-- Replies:
--   {1, writes}   written: value = ARGV[2], token raised to ARGV[1]; writes is the length of
--                 the log with this write.
--   {0, highest}  refused: ARGV[1] is lower than the highest token seen; nothing changed.

local token = tonumber(ARGV[1])
local highest = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if token < highest then
  return {0, highest}
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return {1, redis.call('RPUSH', KEYS[2], ARGV[1])}
