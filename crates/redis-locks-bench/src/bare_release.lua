-- bare_release.lua: the bare-minimum compare-and-delete release the benchmarks compare with.
--
-- KEYS[1]  the lock key.
-- ARGV[1]  the owner token.
--
-- Replies:
--   1  deleted: the key held ARGV[1].
--   0  not deleted: the key is gone or holds another token.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
