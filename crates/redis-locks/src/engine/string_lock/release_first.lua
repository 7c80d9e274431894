-- release_first.lua: the common case of release.lua, put before the preludes so that it
-- costs no more than it must (a script defines every prelude function on every call): the
-- key holds exactly the caller's owner token, not marked, so nobody waits. KEYS and ARGV as
-- release.lua.
--
-- Replies:
--   1  released (release.lua's reply 1; nobody was waiting, so nothing is published).
-- Falls through to release.lua for every other case.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
