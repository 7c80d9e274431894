-- release_first.lua: the common case of release.lua, put before the preludes so that it
-- costs no more than it must: the caller's hold is the lock's only hold, and the hash has no
-- 'waiting' mark, so nobody waits to be woken (see holds.lua). It reads no clock and does not
-- look at the queue: a lone hold is live while its key exists, since the key expires with its
-- latest hold, and a waiter in line marks the hash. KEYS and ARGV as release.lua.
--
-- A read hold kept as a plain key ('<hold> r <owner>', see holds.lua) is the lock's only hold
-- and nobody waits behind it (a waiter turns it into the hash, marked; a line the first attempt
-- found beside it is prodded by the script the attempt asks next, engine/first.rs): the
-- caller's when its hold id leads the value.
--
-- Replies:
--   {1, 0}  released: the lock key is gone (release.lua's reply when the owner has no more
--           holds; nobody waited, so nothing is published).
-- Falls through to release.lua, having written nothing, for every other case (including a
-- key of another type: its HLEN error is caught here, and release.lua says what the key is).

local fields = redis.pcall('HLEN', KEYS[1])
if type(fields) == 'table' then
  local value = redis.pcall('GET', KEYS[1])
  if type(value) == 'string' and string.sub(value, 1, #ARGV[1] + 3) == ARGV[1] .. ' r ' then
    redis.call('DEL', KEYS[1])
    return {1, 0}
  end
elseif fields == 1 then
  -- An RwLock's lone read hold (a write hold comes with 'writer' and 'token', a
  -- ReentrantMutex's with 'kind' too, a waiter's mark with 'waiting'): the caller's if it
  -- deletes it (the field is named by the caller's own random hold id, which only its
  -- acquisition wrote), and the hash goes with its last field.
  if redis.call('HDEL', KEYS[1], 'h:' .. ARGV[1]) == 1 then
    return {1, 0}
  end
elseif fields == 3 or fields == 4 then
  -- 'writer', 'token' and the caller's write hold (and 'kind' for a ReentrantMutex); four
  -- fields without a kind are a write hold with another hold or a waiter's mark.
  local value = redis.call('HGET', KEYS[1], 'h:' .. ARGV[1])
  if value and string.match(value, '^%d+ w ') and
      (fields == 3 or redis.call('HGET', KEYS[1], 'kind')) then
    redis.call('DEL', KEYS[1])
    return {1, 0}
  end
end
