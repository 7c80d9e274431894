-- acquire.lua (read_floor example): the least a read hold kept as a field of one hash can do
-- in a script. Not a lock: no kinds, no queue, no hold lease on the server clock, no
-- vouching of the counter; only what every hash-based read acquire runs at the least.
--
-- KEYS[1]  the lock hash.
-- KEYS[2]  the fencing counter.
-- KEYS[3]  what keeps readers out (a writer's key or a queue).
-- ARGV[1]  the hold's field.
-- ARGV[2]  the owner.
-- ARGV[3]  the lease in milliseconds.
--
-- Replies:
--   token  granted: the new fencing token (INCR of KEYS[2]); the field is written, the hash's
--          TTL set to the lease.
--   0      refused: KEYS[3] exists.

if redis.call('EXISTS', KEYS[3]) == 0 then
  local token = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. token)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return token
end
return 0
