-- hold_acquire.lua: the least a hold kept as a field of one hash can do in a script, the floor
-- of the hash-based locks (`RwLock` read and write, `ReentrantMutex`) that `bench throughput`
-- and the `read_floor` example measure the library against. Not a lock: no kinds, no hold
-- deadline on the server clock, no queue to join, no vouching of the counter; only what every
-- hash-based acquire runs at the least.
--
-- KEYS[1]  the lock hash.
-- KEYS[2]  the fencing counter.
-- KEYS[3]  what keeps the hold out while it exists: for a read hold the writer's key, for a
--          write (or reentrant) hold the lock hash itself (any hold there); KEYS[4] the queue,
--          which keeps it out too.
-- ARGV[1]  the hold's field.
-- ARGV[2]  the owner.
-- ARGV[3]  the lease in milliseconds.
--
-- Replies:
--   token  granted: the new fencing token (INCR of KEYS[2]); the field is written, and the
--          hash's TTL is at least the lease (set when it had none, raised when it was
--          shorter: never shortened, so another reader's longer lease keeps its field).
--   0      refused: KEYS[3] or KEYS[4] exists.

if redis.call('EXISTS', KEYS[3], KEYS[4]) == 0 then
  local token = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. token)
  redis.call('PEXPIRE', KEYS[1], ARGV[3], 'NX')
  redis.call('PEXPIRE', KEYS[1], ARGV[3], 'GT')
  return token
end
return 0
