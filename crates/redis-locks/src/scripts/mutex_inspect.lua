-- mutex_inspect.lua: read a Mutex's state in one consistent step. Writes nothing.
--
-- KEYS[1]  the lock key.
-- KEYS[2]  the fencing counter.
--
-- Replies:
--   {owner, pttl, counter}
--     owner    the holder's owner token, or '' when the lock is free.
--     pttl     the holder's remaining lease in ms; -2 when free; -1 when the key has no
--              expiry (it was not written by this library).
--     counter  the fencing counter: the token of the latest acquisition, which is the
--              holder's token while the lock is held; 0 if the lock was never taken.
-- Errors:
--   WRONGTYPE  KEYS[1] is not a string, or KEYS[2] is not a string.
--   ERR ...    KEYS[2] is a string that is not an integer.

local owner = redis.call('GET', KEYS[1])
local pttl = -2
if owner then
  pttl = redis.call('PTTL', KEYS[1])
else
  owner = ''
end
local counter = redis.call('GET', KEYS[2])
if counter then
  counter = tonumber(counter)
  if not counter then
    return redis.error_reply('ERR fencing counter ' .. KEYS[2] .. ' is not an integer')
  end
else
  counter = 0
end
return {owner, pttl, counter}
