-- acquire.lua: take several locks of one slot together, all or none, first come, first
-- served in each lock's line (after the preludes fence.lua: server_micros, next_token;
-- lock.lua: holder_in, plain_other, with_mark, mark_waited, wake, wrong_kind; queue.lua; lines.lua).
--
-- KEYS     per lock i, five (see lines.lua): the lock key, its fencing counter, its queue,
--          places and ticket counter; all in one slot.
-- ARGV[1]  the owner token (32 lowercase hex characters, '@' and its client's wake-up
--          address: see wake in lock.lua).
-- ARGV[2]  the lease in ms (a positive integer).
-- ARGV[3]  the place lease in ms; 0 means "try once": take the locks only if they are free
--          now (a single lock: with nobody else first in its line), and never join a line.
-- ARGV[3+i]  lock i's wake channel.
--
-- The locks are looked at in order, before anything is written: lock i refuses when another
-- owner holds it. A single lock (a slot's only lock of the MultiLock: the common case on a
-- cluster) also refuses when it is free but another waiter is first in its line: it is served
-- first, no barging past a line. Several locks are taken whenever all are free at once,
-- whoever stands in their lines: waiting to be first in every line it crosses would move a
-- waiter to the back of each in turn (measured: `bench multilock` on one server, the longest
-- wait 9 s against 2 s).
--
-- Replies:
--   {1, token_1, ..., token_n}  every lock is ARGV[1]'s now until now + ARGV[2]; token_i is
--               lock i's new fencing token (next_token). Also the reply when some or all
--               were ARGV[1]'s already (a retried request, a grant that came back late).
--               ARGV[1] left every line of these locks.
--   {0, i, pttl}  nothing taken: lock i refused. pttl is its holder's remaining lease in ms
--               (-1 when its key has no expiry), or -2 when it is the only lock and free but
--               another waiter is first in its line (that waiter is woken, to take it). With ARGV[3] > 0,
--               ARGV[1] now has a place in lock i's line (leased until now + ARGV[3]) and in
--               no other line of these locks, and a held lock i with a lease is marked, so
--               that its release wakes the line.
-- Errors (nothing written):
--   WRONGTYPE <key> ...  a key holds another Redis type or another primitive's plain key
--                        (see plain_other in lock.lua), or a counter is not an integer.

local owner, lease, place_lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
local count = locks()
local wrong = lines_wrong_type(count)
if wrong then
  return wrong
end
-- Each lock key's value, read before anything is written: another primitive's plain key (a
-- semaphore's permit, an RwLock's read hold) is refused as such, never marked.
local values = {}
for i = 1, count do
  local fence = lock_key(i, 2)
  local counter = redis.call('GET', fence)
  if counter and not (string.match(counter, '^%-?%d+$') and string.len(counter) <= 19) then
    return redis.error_reply('WRONGTYPE ' .. fence .. ' is not a fencing counter: not an integer')
  end
  values[i] = redis.call('GET', lock_key(i, 1))
  local other = plain_other(lock_key(i, 1), values[i])
  if other then
    return other
  end
end
local micros = server_micros()
local now = math.floor(micros / 1000)

-- Look at every lock (and its line) before taking any.
local refused, pttl, first = nil, -2, nil
local marks = {}
for i = 1, count do
  queue_purge(lock_key(i, 3), lock_key(i, 4), now)
  local holder, marked = holder_in(values[i])
  if holder and holder ~= owner then
    refused, pttl = i, redis.call('PTTL', lock_key(i, 1))
    break
  end
  first = count == 1 and queue_head(lock_key(i, 3))
  if not holder and first and first ~= owner then
    refused = i
    break
  end
  marks[i] = marked
end

if not refused then
  local reply = {1}
  for i = 1, count do
    local token, err = next_token(lock_key(i, 2), micros)
    if not token then
      return err
    end
    local value = owner
    if marks[i] then
      -- Ours already and marked: its release still wakes the waiters.
      value = with_mark(owner)
    end
    redis.call('SET', lock_key(i, 1), value, 'PX', lease)
    queue_leave(lock_key(i, 3), lock_key(i, 4), lock_key(i, 5), owner)
    reply[i + 1] = token
  end
  return reply
end

if place_lease > 0 then
  -- Wait in the line of the lock that refused, and in no other.
  for i = 1, count do
    if i ~= refused then
      line_leave(i, owner, ARGV[3 + i])
    end
  end
  queue_join(lock_key(refused, 3), lock_key(refused, 4), lock_key(refused, 5), owner, now,
    place_lease)
  if pttl >= 0 then
    mark_waited(lock_key(refused, 1))
  end
end
if pttl == -2 then
  -- Free, but another waiter is first in line: prod it.
  wake(ARGV[3 + refused], first)
end
return {0, refused, pttl}
