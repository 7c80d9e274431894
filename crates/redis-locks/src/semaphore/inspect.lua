-- inspect.lua: read a semaphore in one step, writing nothing (after the preludes fence.lua:
-- read_counter; lock.lua; permits.lua).
--
-- KEYS[1]  the semaphore: its hash, or a permit kept as a plain key (see permits.lua).
-- KEYS[2]  the fencing counter.
-- KEYS[3]  the places (waiters by place-lease end).
--
-- Reply: {limit, counter, waiting, owner_1, permits_1, ms_1, owner_2, ...}
--   limit    the stored N, or -1 when nobody holds or waits.
--   counter  the fencing counter (0 when never taken).
--   waiting  how many waiters' place leases still run.
--   then, for each holder whose lease has not ended, earliest lease end first: its owner
--   token, how many permits it holds, and the ms its lease still runs.
-- Errors:
--   WRONGTYPE <key> ...  a key holds another Redis type (or KEYS[1] a hash that is no
--                        semaphore's), or the counter is not an integer.

local wrong = wrong_kind(KEYS[3], 'zset', 'a semaphore')
if wrong then
  return wrong
end
local counter, err = read_counter(KEYS[2])
if not counter then
  return err
end
local now = server_ms()
local state
state, err = permits_read(KEYS[1], now)
if not state then
  return err
end
local live = {}
for owner, held in pairs(state.holders) do
  live[#live + 1] = {owner = owner, held = held}
end
table.sort(live, function(a, b)
  if a.held.deadline ~= b.held.deadline then
    return a.held.deadline < b.held.deadline
  end
  return a.owner < b.owner
end)
local reply = {state.limit or -1, counter,
  #redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf')}
for _, holder in ipairs(live) do
  table.insert(reply, holder.owner)
  table.insert(reply, holder.held.count)
  table.insert(reply, holder.held.deadline - now)
end
return reply
