-- read.lua: read the checked resource, refusing a holder whose fencing token is stale.
--
-- The resource stands for the data a lock protects: a store that checks fencing tokens on
-- every access, reads included, so that once a newer holder has read it no older holder can
-- write what it read before (a read-modify-write stays whole).
--
-- KEYS[1]  the resource: a hash {value = integer, token = highest fencing token seen}.
-- ARGV[1]  the reader's fencing token (0 for an algorithm without tokens: never refused
--          while no token was seen).
-- ARGV[2]  "raise": the read counts as an access of the holder (an exclusive holder's read
--          raises the highest token); "check": it does not (a shared holder's read).
--
-- Replies:
--   {1, value}    read: value is the resource's integer (0 when absent).
--   {0, highest}  refused: ARGV[1] is lower than the highest token seen; nothing changed.

local token = tonumber(ARGV[1])
local highest = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if token < highest then
  return {0, highest}
end
if ARGV[2] == 'raise' and token > highest then
  redis.call('HSET', KEYS[1], 'token', ARGV[1])
end
return {1, tonumber(redis.call('HGET', KEYS[1], 'value') or '0')}
