-- extend.lua: set the lease of one hold of a lock kept in a hash, by its hold id (after the
-- preludes lock.lua and holds.lua). Only this hold's deadline changes; the key then expires
-- with its latest hold (sooner, when this one was the latest and is shortened).
--
-- KEYS[1]  the lock key (a hash, or a read hold kept as a plain key: see holds.lua).
-- ARGV[1]  the hold id.
-- ARGV[2]  the new lease in milliseconds, counted from now (a positive integer).
--
-- Replies:
--   1  extended: the hold was live and now ends ARGV[2] ms from now.
--   0  not extended: the hold is gone (its lease ran out). Expired holds are cleaned up.
-- Errors (nothing written):
--   ERR ...              ARGV[2] is not a positive integer.
--   WRONGTYPE <key> ...  KEYS[1] is not a lock of holds (another type, or a hash that is
--                        not one).

local key, hold, lease = KEYS[1], ARGV[1], holds_number(ARGV[2], 1)
if not lease then
  return redis.error_reply('ERR extend.lua: the lease must be a positive integer (ms)')
end
-- A read hold kept as a plain key (see holds.lua): its lease is the key's TTL. (GET fails on
-- the hash, which the rest reads.)
local plain = redis.pcall('GET', key)
if holds_plain(plain) == hold then
  local set = redis.pcall('PEXPIRE', key, lease)
  if type(set) == 'table' and set.err then
    return refusal(set.err, 'pexpire')
  end
  return 1
end
local wrong, now, state, mine = holds_find(KEYS, hold)
if wrong then
  return wrong
end
if not mine then
  return 0
end
redis.call('HSET', key, 'h:' .. hold, hold_value(now + lease, mine.mode, mine.token, mine.owner))
mine.deadline = now + lease
local refused = holds_expire(key, state)
if refused then
  return refused
end
return 1
