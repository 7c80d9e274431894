-- release.lua (read_floor example): the least a hash-based read release can do in a script.
--
-- KEYS[1]  the lock hash.
-- ARGV[1]  the hold's field.
--
-- Replies:
--   1  the field was there and is deleted.
--   0  it was not there.

return redis.call('HDEL', KEYS[1], ARGV[1])
