-- extend_many.lua: give many held Mutexes (or FairMutexes) a new lease in one call, each only
-- for its owner (after the lock.lua prelude: holder_in): the watchdog's batched renewal. Each
-- lock is judged alone, as extend.lua judges it.
--
-- KEYS[i]        the lock key of the i-th lock (on a cluster, all of one slot).
-- ARGV[3i - 2]   the owner token the i-th lock was acquired with.
-- ARGV[3i - 1]   its new lease in milliseconds, counted from now (a positive integer).
-- ARGV[3i]       ignored (extend.lua's restore flag; a batch never restores).
--
-- Replies: an array, for each KEYS[i] in order:
--    1  extended: the key held its owner token (marked by a waiter or not, see lock.lua)
--       and now expires its lease from now; the mark is kept.
--    0  not extended: the key is gone (the lease ran out).
--   -1  not extended: the key holds another owner's token; it is left untouched.
--   -2  not extended: the key is not a string (where extend.lua answers WRONGTYPE); it is
--       left untouched.

local replies = {}
for i, key in ipairs(KEYS) do
  local value = redis.pcall('GET', key)
  if type(value) == 'table' and value.err then
    replies[i] = -2
  else
    local holder = holder_in(value)
    if not holder then
      replies[i] = 0
    elseif holder ~= ARGV[3 * i - 2] then
      replies[i] = -1
    else
      redis.call('PEXPIRE', key, ARGV[3 * i - 1])
      replies[i] = 1
    end
  end
end
return replies
