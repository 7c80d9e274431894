-- raise.lua: the second step of a Redlock grant (after the preludes fence.lua, for
-- read_counter, and lock.lua, for owner_refusal): bring this node's fencing counter up to
-- the token the client chose (the greatest of the tokens the granting majority gave it), but
-- only while this node still holds the caller's lock. The crate documentation, "Redlock"
-- (crates/redis-locks/README.md), says why this makes tokens grow from one holder to the next.
--
-- KEYS[1]  the lock key (a Mutex's: the owner token, perhaps marked by a waiter).
-- KEYS[2]  the fencing counter.
-- ARGV[1]  the caller's owner token.
-- ARGV[2]  the token chosen: a positive integer, below 2^53.
--
-- Replies:
--    1  the key holds ARGV[1]; the counter is now at least ARGV[2] (set to it if lower).
--    0  nothing written: the key is gone (the lease ran out here).
--   -1  nothing written: the key holds another owner's token.
-- Errors (nothing written):
--   WRONGTYPE <key> ...  KEYS[1] is not a string, or KEYS[2] is not an integer.

local refused = owner_refusal(KEYS[1], ARGV[1])
if refused then
  return refused
end
local counter, err = read_counter(KEYS[2])
if not counter then
  return err
end
if counter < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
