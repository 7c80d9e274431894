-- inspect.lua: read a semaphore in one step, writing nothing (after the preludes fence.lua:
-- read_counter; lock.lua; permits.lua).
--
-- KEYS[1]  the holders (see permits.lua).
-- KEYS[2]  the permits hash.
-- KEYS[3]  the fencing counter.
-- KEYS[4]  the places (waiters by place-lease end).
--
-- Reply: {limit, counter, waiting, owner_1, permits_1, ms_1, owner_2, ...}
--   limit    the stored N, or -1 when nobody holds or waits.
--   counter  the fencing counter (0 when never taken).
--   waiting  how many waiters' place leases still run.
--   then, for each holder whose lease has not ended, earliest lease end first: its owner
--   token, how many permits it holds, and the ms its lease still runs.
-- Errors:
--   WRONGTYPE <key> ...  a key holds another Redis type, or the counter is not an integer.

local kinds = {'zset', 'hash', 'string', 'zset'}
for i = 1, 4 do
  local wrong = wrong_kind(KEYS[i], kinds[i], 'a semaphore')
  if wrong then
    return wrong
  end
end
local counter, err = read_counter(KEYS[3])
if not counter then
  return err
end
local now = server_ms()
local reply = {permits_limit(KEYS[2]) or -1, counter,
  #redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. now, '+inf')}
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  local owner = live[i]
  table.insert(reply, owner)
  table.insert(reply, tonumber(redis.call('HGET', KEYS[2], owner)) or 0)
  table.insert(reply, tonumber(live[i + 1]) - now)
end
return reply
