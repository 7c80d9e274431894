-- extend.lua: renew the lease of a semaphore's permits, owner-checked (after the prelude
-- lock.lua: server_ms, wrong_kind, refusal).
--
-- KEYS[1]  the semaphore: its hash, or a permit kept as a plain key (see permits.lua).
-- ARGV[1]  the owner token.
-- ARGV[2]  the new lease in ms, from now (a positive integer).
--
-- Replies:
--   1  extended: ARGV[1]'s permits are its until now + ARGV[2] (server clock), and the hash
--      lasts at least that long (raised, never lowered: other holders' leases may be longer).
--      A permit kept as a plain key by ARGV[1] (see permits.lua): the key's TTL is the lease.
--   0  ARGV[1] holds no permits: its lease ended (the permits came back), or it released.
-- Errors (nothing written):
--   WRONGTYPE <key> ...  KEYS[1] holds another Redis type (or a string that is no permit).
--   NOPERM ...           the user may not run PEXPIRE.

local owner, lease = ARGV[1], tonumber(ARGV[2])
local held = redis.pcall('HGET', KEYS[1], owner)
if type(held) == 'table' then
  local plain = redis.pcall('GET', KEYS[1])
  local holder = type(plain) == 'string' and string.match(plain, '^(%S+) %d+$')
  if not holder or redis.call('PTTL', KEYS[1]) < 0 then
    return wrong_kind(KEYS[1], 'hash', 'a semaphore')
  end
  if holder ~= owner then
    return 0
  end
  local set = redis.pcall('PEXPIRE', KEYS[1], ARGV[2])
  if type(set) == 'table' then
    return refusal(set.err, 'pexpire')
  end
  return 1
end
local now = server_ms()
local deadline, count = string.match(held or '', '^(%d+) (%d+)$')
if not deadline or tonumber(deadline) <= now then
  return 0
end
-- The TTL first, so that an expiry the user may not set leaves everything as it was.
local set = redis.pcall('PEXPIRE', KEYS[1], ARGV[2], 'GT')
if type(set) == 'table' then
  return refusal(set.err, 'pexpire')
end
if set == 0 and redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
redis.call('HSET', KEYS[1], owner, string.format('%d %s', now + lease, count))
return 1
