-- acquire_first.lua: the common case of acquire.lua for a Redlock's node (ARGV[8] given), put
-- before the preludes so that it costs no more than it must (a script defines every prelude
-- function on every call): the lock is free, so SET NX PX takes it, and the token is
-- max(counter + 1, ARGV[8]). KEYS and ARGV as acquire.lua.
--
-- Replies:
--   {1, token}  acquired (acquire.lua's reply {1, token}).
-- Falls through to acquire.lua for every other case: no ARGV[8], an epoch to record (ARGV[4],
-- which acquire.lua writes), a held key (or one of another type, which SET NX leaves alone),
-- and a counter INCR refuses (the grant is taken back first, and acquire.lua then says what is
-- wrong with the counter).

if ARGV[8] and ARGV[8] ~= '' and (ARGV[5] or '') == '' and (ARGV[4] or '') == '' and
    redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local token = redis.pcall('INCR', KEYS[2])
  if type(token) == 'number' then
    if token < tonumber(ARGV[8]) then
      redis.call('SET', KEYS[2], ARGV[8])
      token = tonumber(ARGV[8])
    end
    return {1, token}
  end
  redis.call('DEL', KEYS[1])
end
