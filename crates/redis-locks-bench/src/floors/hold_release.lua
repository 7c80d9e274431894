-- hold_release.lua: the least a hash-based release (read, write, reentrant) can do in a script:
-- delete the hold, and say whether anyone waits (a release must then wake them).
--
-- KEYS[1]  the lock hash.
-- KEYS[2]  the queue.
-- ARGV[1]  the hold's field.
--
-- Replies:
--   {deleted, waiting}  deleted: 1 when the field was there (it is gone now), 0 when it was
--                       not; waiting: 1 when KEYS[2] exists, else 0.

return {redis.call('HDEL', KEYS[1], ARGV[1]), redis.call('EXISTS', KEYS[2])}
