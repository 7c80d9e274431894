-- set.lua: write a resource only for a fencing token at least as high as any seen.
--
-- KEYS[1]  the resource: a string key (absent, or a string).
-- KEYS[2]  the highest fencing token that has written the resource (an integer string).
-- ARGV[1]  the writer's fencing token (a decimal integer).
-- ARGV[2]  the value to write.
--
-- Replies:
--   {1, previous}  written: KEYS[1] = ARGV[2], KEYS[2] = ARGV[1]; previous is the highest
--                  token seen before (0 if none). An equal token writes too (one holder
--                  writing twice).
--   {0, highest}   refused: the token is lower than the highest seen; nothing was written.
-- Errors (nothing written):
--   WRONGTYPE  KEYS[1] or KEYS[2] holds another type than a string.
--   WRONGTYPE <key> ...  KEYS[2] is a string that is not an integer.
--   ERR ...    ARGV[1] is not an integer.

for i = 1, 2 do
  local kind = redis.call('TYPE', KEYS[i]).ok
  if kind ~= 'none' and kind ~= 'string' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. kind)
  end
end
local token = tonumber(ARGV[1])
if not token then
  return redis.error_reply('ERR fencing token ' .. ARGV[1] .. ' is not an integer')
end
local highest = tonumber(redis.call('GET', KEYS[2]) or '0')
if not highest then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' is not a highest token: not an integer')
end
if token < highest then
  return {0, highest}
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[1])
return {1, highest}
