-- acquire.lua: take a read or write hold of a lock kept in a hash (an RwLock, or a
-- ReentrantMutex, which has only write holds), after the preludes fence.lua (next_token, epochs_wrong_type,
-- epochs_record),
-- lock.lua, queue.lua (the queue) and holds.lua (the hash; its layout is described there).
--
-- KEYS[1]  the lock key (a hash, or a read hold kept as a plain key: see holds.lua).
-- KEYS[2]  the fencing counter (one for readers and writers).
-- KEYS[3]  the lock's queue of waiters, KEYS[4] its place leases, KEYS[5] its ticket counter.
-- ARGV[1]  the kind: 'rwlock' or 'reentrant'.
-- ARGV[2]  the mode: 'r' (read) or 'w' (write).
-- ARGV[3]  the hold id of this acquisition (new per guard: 32 lowercase hex characters, '@'
--          and the client's wake-up address, so that wake-ups addressed to it go to that
--          client's own channel; see wake in lock.lua).
-- ARGV[4]  the owner id (the OwnerId of the handle; non-empty, no control characters).
-- ARGV[5]  the lease in milliseconds (a positive integer).
-- ARGV[6]  the place lease in milliseconds: '0' asks without waiting (no place in the
--          queue); otherwise a refusal gives the caller a place in the queue (or renews it)
--          under the id ARGV[2] .. ARGV[3], and a grant takes it out.
-- ARGV[7]  the lock's wake channel.
-- KEYS[6]  optional, with ARGV[8]: the fencing counter's epochs (fence.lua).
-- ARGV[8]  optional: the name of the connection this script runs on, recorded in KEYS[6] on a
--          grant with a new token (the counter is then vouched for on that connection, and
--          the client's next first attempt at a read hold may trust its pipelined INCR:
--          engine/first.rs). '' or absent leaves KEYS[6] alone.
--
-- Who may enter:
--   - the owner's own re-entry, at once: a write hold when the owner is the writer (it
--     keeps the writer's fencing token, and the owner's other write holds are renewed to
--     at least this lease), a read hold when the owner is the writer or holds
--     a read hold already (so a reader that reads again never waits behind a writer that
--     waits for it);
--   - a writer when no hold is live and nobody waits before it in the queue;
--   - a reader when no write hold is live and no writer waits before it in the queue (or
--     in the queue at all, for a reader without a place): once a writer waits, readers
--     that come later queue behind it.
--
-- Replies:
--   {1, token}  granted: the hold h:ARGV[3] is written with the lease, and token is its
--               fencing token (a new one from KEYS[2], or the writer's own on a write
--               re-entry). Also the reply when the hold exists already (a retried request,
--               or a read hold the client's first attempt took as a plain key, see
--               holds.lua): its lease is set again and it keeps its token, or is given a new
--               one when the server kept none (0).
--   {0, ms}     held: ms is how long until the first hold that keeps the caller out ends
--               (a waiter retries then at the latest, in case its holder died).
--   {0, -2}     the lock could be entered but others queue first; the first of them that
--               may enter is woken (in case its wake-up was lost).
--   {0, -3}     refused for good: a write hold asked by an owner that holds only read
--               holds (an upgrade; two upgraders would wait for each other forever).
-- Errors (no hold written; expired holds and places may have been cleaned up, and a read
-- hold kept as a plain key turned into the hash):
--   WRONGTYPE <key> ...  KEYS[1] is not a lock of holds (another type, or a hash that is
--                        not one), or has live holds of another kind; a queue key holds
--                        another type; KEYS[2] is not an integer (only checked when a new
--                        token is taken); KEYS[6] (with ARGV[8]) is not a sorted set.
--   ERR ...              ARGV[3] names a live hold of another mode or owner (hold ids are
--                        random per acquisition: never sent by the library).
--   ERR ...              an argument out of its range (kind, mode, an empty hold or owner,
--                        a lease that is not a positive integer, a place lease that is not
--                        a non-negative integer); nothing is read or written.

local key, kind, mode, hold, owner = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local lease, place_lease = holds_number(ARGV[5], 1), holds_number(ARGV[6], 0)
if (kind ~= 'rwlock' and kind ~= 'reentrant') or (mode ~= 'r' and mode ~= 'w') or not lease
    or not place_lease or hold == '' or owner == '' then
  return redis.error_reply('ERR acquire.lua: bad arguments (kind, mode, hold, owner, lease, place lease)')
end
local epoch = ARGV[8] ~= nil and ARGV[8] ~= '' and ARGV[8]
if epoch then
  local wrong = epochs_wrong_type(KEYS[6])
  if wrong then
    return wrong
  end
end

-- The common case first, in as few calls as it takes: nobody holds the lock and nobody
-- waits (the lock key and the queue are absent), so either mode enters at once.
-- The token and deadline go to the server as text made here once: a number passed to
-- redis.call is printed with %.17g on every call, which for these 13 and 16 digits costs
-- about as much as the call.
if redis.call('EXISTS', key, KEYS[3]) == 0 then
  local micros, clock = server_clock()
  local token, err = next_token(KEYS[2], micros, clock)
  if not token then
    return err
  end
  if token ~= micros then
    clock = string.format('%d', token)
  end
  local deadline = string.format('%d', math.floor(micros / 1000) + lease)
  local value = deadline .. ' ' .. mode .. ' ' .. clock .. ' ' .. owner
  hold_write(key, kind, mode, hold, value, owner, clock)
  local refused = holds_expire_at(key, deadline)
  if refused then
    return refused
  end
  if epoch then
    epochs_record(KEYS[6], epoch, math.floor(micros / 1000))
  end
  return {1, token}
end

local wrong = holds_not_ours(key) or queue_wrong_type(KEYS[3], KEYS[4], KEYS[5])
if wrong then
  return wrong
end
local micros = server_micros()
local now = math.floor(micros / 1000)
local state
state, wrong = holds_read(key, now, true)
wrong = wrong or holds_other_kind(key, state, kind)
if wrong then
  return wrong
end
local id = mode .. hold
local placed = place_lease > 0
queue_purge(KEYS[3], KEYS[4], now)

local function grant(token)
  hold_write(key, kind, mode, hold, hold_value(now + lease, mode, token, owner), owner, token)
  state.holds[hold] = {deadline = now + lease, mode = mode, token = token, owner = owner}
  local refused = holds_expire(key, state)
  if refused then
    return refused
  end
  queue_leave(KEYS[3], KEYS[4], KEYS[5], id)
  holds_mark_waiting(key, KEYS[3])
  return {1, token}
end

local function fresh_grant()
  local token, err = next_token(KEYS[2], micros)
  if not token then
    return err
  end
  if epoch then
    epochs_record(KEYS[6], epoch, now)
  end
  return grant(token)
end

local function wait_in_line()
  if placed then
    queue_join(KEYS[3], KEYS[4], KEYS[5], id, now, place_lease)
    if state.count > 0 then
      holds_mark_waiting(key, KEYS[3])
    end
  end
end

-- A retried request: the hold is there already (under this mode and owner only: a hold id
-- is never another acquisition's). A hold the server kept no token for (one taken as a plain
-- key) is numbered now.
local mine = state.holds[hold]
if mine then
  if mine.mode ~= mode or mine.owner ~= owner then
    return redis.error_reply('ERR acquire.lua: hold ' .. hold .. ' was taken in another mode or by another owner')
  end
  if mine.token == 0 then
    return fresh_grant()
  end
  return grant(mine.token)
end

-- Re-entry. A write re-entry renews the owner's other write holds too: the lock is the
-- owner's at least until now + lease, by every hold.
if mode == 'w' and state.writer == owner then
  for other, held in pairs(state.holds) do
    if held.mode == 'w' and held.deadline < now + lease then
      redis.call('HSET', key, 'h:' .. other, hold_value(now + lease, 'w', held.token, held.owner))
      held.deadline = now + lease
    end
  end
  return grant(state.token)
end
if mode == 'r' and (state.writer == owner or state.reads_of[owner]) then
  return fresh_grant()
end
if mode == 'w' and state.reads_of[owner] then
  return {0, -3}
end

-- Held against this mode.
local soonest = holds_soonest(state, mode)
if soonest then
  wait_in_line()
  return {0, math.max(soonest - now, 1)}
end

-- Free for this mode: enter unless others queue first.
local ahead
if mode == 'w' then
  local head = queue_head(KEYS[3])
  ahead = head and head ~= id
else
  local rank = redis.call('ZRANK', KEYS[3], id)
  local before = {}
  if not rank then
    before = redis.call('ZRANGE', KEYS[3], 0, -1)
  elseif rank > 0 then
    before = redis.call('ZRANGE', KEYS[3], 0, rank - 1)
  end
  ahead = false
  for _, other in ipairs(before) do
    if string.sub(other, 1, 1) == 'w' then
      ahead = true
      break
    end
  end
end
if ahead then
  wait_in_line()
  wake_front(KEYS[3], ARGV[7], state)
  return {0, -2}
end
return fresh_grant()
