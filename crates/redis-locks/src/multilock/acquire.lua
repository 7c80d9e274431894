-- acquire.lua: take several locks of one slot together, all or none (after the preludes
-- fence.lua: server_micros, next_token; waiters.lua: holder_of, with_mark, mark_waited).
--
-- Each lock is a Mutex's lock key (a string holding the owner token, with the waiters' mark
-- '+w' when marked), so a Mutex and a MultiLock over the same name exclude each other.
--
-- KEYS[3i-2]  the i-th lock key (i = 1 .. #KEYS / 3; all in one slot).
-- KEYS[3i-1]  its fencing counter.
-- KEYS[3i]    its queue of waiters (read by release.lua; passed here so every script of a
--             MultiLock takes the same KEYS).
-- ARGV[1]  the owner token.
-- ARGV[2]  the lease in ms (a positive integer).
-- ARGV[3]  '1' to mark a lock found held, so its release publishes a wake-up (a waiting
--          attempt); '0' to mark nothing (try once).
--
-- Replies:
--   {1, token_1, ..., token_n}  every lock was free (or ARGV[1]'s already: a retried
--                               request, a grant that came back late) and is ARGV[1]'s now
--                               until now + ARGV[2]; token_i is the i-th lock's new fencing
--                               token (next_token: max(counter + 1, the server clock in µs)).
--   {0, i, pttl}                nothing was taken: the i-th lock is held by another owner,
--                               for pttl ms more (-1 when its key has no expiry). With
--                               ARGV[3] = '1' it is marked.
-- Errors (nothing written):
--   WRONGTYPE <key> ...  a lock key or counter holds another Redis type, or a counter is not
--                        an integer.

local owner, lease, mark = ARGV[1], ARGV[2], ARGV[3] == '1'
local count = #KEYS / 3
for i = 1, count do
  local lock, fence = KEYS[3 * i - 2], KEYS[3 * i - 1]
  local wrong = wrong_kind(lock, 'string', 'a lock') or wrong_kind(fence, 'string', 'a fencing counter')
  if wrong then
    return wrong
  end
  local counter = redis.call('GET', fence)
  if counter and not (string.match(counter, '^%-?%d+$') and string.len(counter) <= 19) then
    return redis.error_reply('WRONGTYPE ' .. fence .. ' is not a fencing counter: not an integer')
  end
end
-- Look at every lock before writing anything: all or none.
local marks = {}
for i = 1, count do
  local lock = KEYS[3 * i - 2]
  local holder, marked = holder_of(lock)
  if holder and holder ~= owner then
    local pttl = redis.call('PTTL', lock)
    if mark and pttl >= 0 then
      mark_waited(lock)
    end
    return {0, i, pttl}
  end
  marks[i] = marked
end
local micros = server_micros()
local reply = {1}
for i = 1, count do
  local lock, fence = KEYS[3 * i - 2], KEYS[3 * i - 1]
  local token, err = next_token(fence, micros)
  if not token then
    return err
  end
  local value = owner
  if marks[i] then
    -- Ours already and marked by a waiter: its release still wakes the waiters.
    value = with_mark(owner)
  end
  redis.call('SET', lock, value, 'PX', lease)
  reply[i + 1] = token
end
return reply
