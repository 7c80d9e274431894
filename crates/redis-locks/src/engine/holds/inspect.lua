-- inspect.lua: read the state of a lock kept in a hash in one consistent step (after the
-- preludes fence.lua (read_counter), lock.lua and holds.lua). Writes nothing.
--
-- KEYS[1]  the lock key (a hash, or a read hold kept as a plain key: see holds.lua).
-- KEYS[2]  the fencing counter.
-- KEYS[3]  the place leases of the lock's queue (queue.lua).
--
-- Replies:
--   {kind, counter, waiting_readers, waiting_writers, holds...}
--     kind      'rwlock' or 'reentrant', or '' when the lock is free.
--     counter   the fencing counter (the latest token handed out); 0 if never taken.
--     waiting_readers, waiting_writers
--               the waiters in the queue whose place is still leased, by mode.
--     holds     five values per live hold, in no particular order:
--               hold id, mode ('r' or 'w'), owner id, remaining lease in ms, fencing token.
-- Errors:
--   WRONGTYPE <key> ...  KEYS[1] is not a lock of holds (another type, or a hash that is
--                        not one), or KEYS[2] is not an integer (or not a string).

local key = KEYS[1]
local wrong = holds_not_ours(key)
if wrong then
  return wrong
end
local now = server_ms()
local state, foreign = holds_read(key, now, false)
if foreign then
  return foreign
end
local kind = ''
if state.count > 0 then
  kind = state.kind
end
local counter, err = read_counter(KEYS[2])
if not counter then
  return err
end
local readers, writers = 0, 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf')) do
  -- (A Mutex's waiter ids are hex: neither 'r' nor 'w'.)
  local mode = string.sub(id, 1, 1)
  if mode == 'w' then
    writers = writers + 1
  elseif mode == 'r' then
    readers = readers + 1
  end
end
local reply = {kind, counter, readers, writers}
for hold, h in pairs(state.holds) do
  for _, value in ipairs({hold, h.mode, h.owner, h.deadline - now, string.format('%d', h.token)}) do
    table.insert(reply, value)
  end
end
return reply
