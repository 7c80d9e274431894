-- holds.lua: the prelude of the scripts of locks kept in a hash (RwLock and ReentrantMutex),
-- put after lock.lua (and queue.lua where a script keeps waiters in line). It defines
-- functions and runs nothing by itself.
--
-- The lock key K is a hash while the lock is held, absent while it is free:
--   kind         'reentrant' for a ReentrantMutex; absent for an RwLock (so that a lone read
--                hold is the hash's only field, and its HDEL takes the key with it). An
--                'rwlock' kind, written by earlier versions, is read as an RwLock's.
--   writer       the owner id (OwnerId) whose write holds these are; absent with none.
--   token        the fencing token of the writer's first write hold (re-entries keep it).
--   waiting      '1' while waiters may be in the queue: written by the acquire that puts a
--                waiter in line while the lock is held, by a grant that leaves others in
--                line, and by the turning of a plain read hold into the hash (see below: a
--                line may have come in beside it) (a hash is only ever made so, by a grant, or
--                by a first acquire when nobody waits), never taken away while the hash lives. So a hash without it has
--                nobody in line to wake, and the release of a lone hold (release_first.lua)
--                need not look at the queue.
--   h:<hold>     one field per hold (per guard): '<deadline> <mode> <token> <owner>', with
--                <hold> the guard's random hold id (its owner token), <deadline> the server time (ms)
--                at which the hold's lease ends, <mode> 'r' (read) or 'w' (write), <token>
--                the hold's fencing token and <owner> its owner id (which may contain
--                spaces, so it comes last).
-- Each hold has its own lease on the server clock: a hold whose deadline passed counts for
-- nothing and is deleted by the next script that reads the hash. The key expires at the
-- latest deadline of its live holds (PEXPIREAT, set by every script that changes a
-- deadline or gives a hold back), so no code path leaves the key without a TTL, and a key
-- that is still there has a live latest hold: a hold alone in the hash is live while the
-- key exists (until the very millisecond of its deadline, when Redis still keeps the key),
-- which is what lets release_first.lua give a lone hold back without reading the clock.
--
-- A lone read hold kept as a plain key: while nobody else holds an RwLock or waits, one read
-- hold may be the string K = '<hold> r <owner>' instead (matched by '^(%S+) r (.+)$': a hold
-- id has no space), with the hold's lease as its TTL, written by the client's first attempt
-- (SET NX PX, no script: engine/first.rs). The pipelined INCR after it numbers the hold,
-- so the server keeps no token for it: read as a hold, its token is 0 (unknown; the guard has
-- it). Every script reads it as the hash it stands for (holds_read): the lone read hold
-- <hold> of <owner>, live while the key exists, its deadline now + the key's PTTL; and every
-- script that may write turns it into that hash first (holds_read with purge), so the two
-- forms never live at once. A hold whose token is 0 is numbered afresh when it is asked for
-- again (acquire.lua).
--
-- Waiters wait in the lock's queue (queue.lua), each under its own id: 'r' or 'w' (its
-- mode) followed by its hold id. A waiter is woken by a wake-up addressed to that id.
--
-- holds_plain(value)
--   The hold id and owner id of a read hold kept as a plain key, from the key's value (nil for
--   any other value, or none).
--
-- holds_not_ours(key)
--   Returns a 'WRONGTYPE <key> ...' error reply when key is neither absent, nor a read hold
--   kept as a plain key, nor a hash whose kind is 'reentrant', 'rwlock' or absent: such a key
--   is never written or deleted by these scripts. Else nil. (A hash without a kind is a lock of holds only if every field is an
--   RwLock's: holds_read says when it is not.)
--
-- holds_other_kind(key, state, kind)
--   After holds_read: a 'WRONGTYPE <key> is in use as ...' error reply when key has live
--   holds of another kind than kind (a name in use as another primitive); else nil. A lock
--   whose holds all expired is free for either kind.
--
-- holds_number(text, least)
--   text as an integer if it is one and at least least, else nil (for leases from ARGV).
--
-- holds_read(key, now, purge)
--   Reads the holds of key (absent, or a key holds_not_ours accepted) at server time now
--   (ms). A hash without a kind that has no hold, or a field no RwLock has (other than
--   'writer', 'token', 'waiting' and holds 'h:<hold>' whose value is a hold's), is no lock (these
--   scripts never leave a hash without a hold): then it returns nil and a
--   'WRONGTYPE <key> ...' error reply, having written nothing. With purge, deletes the holds
--   whose deadline passed (and the writer and token fields with the last write hold, and the
--   key with the last hold), and turns a read hold kept as a plain key into the hash (the same
--   hold, deadline and TTL, token 0, and the 'waiting' mark), having asked first that the expiry may be set (if not:
--   nil and the NOPERM reply, nothing written). A plain key that is no read hold, or has no
--   TTL, is no lock (nil and WRONGTYPE). Returns a table:
--     holds        live holds by hold id: {deadline=, mode=, token=, owner=}
--     count        how many live holds
--     writes       how many live write holds
--     writer       the writer's owner id, or false with no live write hold
--     token        the writer's fencing token (a number), or false
--     reads_of     live read holds by owner id: owner -> count
--     latest       the latest deadline of a live hold (0 with none)
--     kind         the kind field ('rwlock' without one), or false for an absent key
--
-- hold_value(deadline, mode, token, owner)
--   The value of a hold field (numbers written in full: Lua's own number format would
--   round a 16-digit fencing token).
--
-- hold_write(key, kind, mode, hold, value, owner, token)
--   Writes the hold field 'h:' .. hold = value in one HSET, with what the hash keeps beside
--   it: the kind for a ReentrantMutex, the writer's owner id and token for a write hold
--   (token as text or as a number).
--
-- holds_find(keys, hold)
--   For the scripts that act on one hold (release, extend, downgrade): keys[1] is the lock
--   key, keys[2..4] (if given) its queue's keys. Returns a WRONGTYPE error reply (nothing
--   written) when keys[1] is not a lock of holds or a queue key holds another type; else
--   nil, the server time now (ms), the holds of the lock read with purge (see holds_read),
--   and the live hold with id hold (nil when it is gone).
--
-- holds_mark_waiting(key, queue)
--   After a waiter joined the queue of a held lock, or a grant left its queue: marks key
--   'waiting' while queue exists.
--
-- holds_soonest(state, mode)
--   The earliest deadline among the live holds that keep a waiter in mode out (every hold
--   for 'w', the write holds for 'r'); nil when none does.
--
-- holds_expire_at(key, at)
--   Makes key expire at server time at (ms): nil, or the error reply of a PEXPIREAT the
--   server refused ('NOPERM ...' naming it, for an ACL without it), having deleted key if it
--   had no TTL (one the calling script just made), so that none is left without one.
--
-- holds_expire(key, state)
--   After a change to state.holds (a hold added, renewed or given back, with state.holds
--   updated to match): key expires at the latest deadline among them (PEXPIREAT; raised
--   or lowered). With no hold left the caller deletes the key instead. Returns what
--   holds_expire_at returns.
--
-- wake_front(queue, channel, state)
--   After a change, wakes the waiters of the queue's front that may now enter: the readers
--   before its first writer (unless a write hold is live), or the first waiter when it is a
--   writer and no hold is live. Looks at the first 64 waiters at most.

local function holds_plain(value)
  if type(value) ~= 'string' then
    return nil
  end
  return string.match(value, '^(%S+) r (.+)$')
end

local function holds_not_ours(key)
  local found = redis.call('TYPE', key).ok
  if found == 'none' then
    return nil
  end
  if found == 'string' and holds_plain(redis.call('GET', key)) then
    return nil
  end
  if found ~= 'hash' then
    return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. found .. ', not a lock of holds')
  end
  local kind = redis.call('HGET', key, 'kind')
  if not kind or kind == 'rwlock' or kind == 'reentrant' then
    return nil
  end
  return redis.error_reply('WRONGTYPE ' .. key .. ' holds a hash that is not a lock of holds')
end

local function holds_other_kind(key, state, kind)
  if state.count > 0 and state.kind ~= kind then
    return redis.error_reply('WRONGTYPE ' .. key .. ' is in use as a ' .. tostring(state.kind) ..
      ', not a ' .. kind)
  end
  return nil
end

local function holds_number(text, least)
  local number = tonumber(text)
  if number and number == math.floor(number) and number >= least then
    return number
  end
  return nil
end

local function hold_value(deadline, mode, token, owner)
  return string.format('%d %s %d %s', deadline, mode, token, owner)
end

local function holds_read_plain(key, now, purge, state)
  local hold, owner = holds_plain(redis.call('GET', key))
  local left = hold and redis.call('PTTL', key) or -1
  if left < 0 then
    return nil, redis.error_reply('WRONGTYPE ' .. key .. ' holds a string that is not a lock of holds')
  end
  -- Held while the key exists (its lease ends with it): under a millisecond left, it ends a
  -- millisecond from now at the latest.
  local deadline = now + math.max(left, 1)
  state.holds[hold] = {deadline = deadline, mode = 'r', token = 0, owner = owner}
  state.count, state.latest, state.kind = 1, deadline, 'rwlock'
  state.reads_of[owner] = 1
  if purge then
    local set = redis.pcall('PEXPIREAT', key, deadline)
    if type(set) == 'table' and set.err then
      return nil, refusal(set.err, 'pexpireat')
    end
    redis.call('DEL', key)
    -- Marked: a line may have come in beside the plain key (the first attempt's EXISTS of
    -- the line is not atomic with its SET), and the mark costs a release only its fast path.
    redis.call('HSET', key, 'h:' .. hold, hold_value(deadline, 'r', 0, owner), 'waiting', '1')
    redis.call('PEXPIREAT', key, deadline)
  end
  return state
end

local function holds_read(key, now, purge)
  local state = {holds = {}, count = 0, writes = 0, writer = false, token = false,
    reads_of = {}, latest = 0, kind = false}
  local fields = redis.pcall('HGETALL', key)
  if fields.err then
    if string.sub(fields.err, 1, 10) ~= 'WRONGTYPE ' then
      return nil, redis.error_reply(fields.err)
    end
    return holds_read_plain(key, now, purge, state)
  end
  local expired = {}
  -- A kind-less hash is an RwLock's only with a hold and nothing that is no RwLock's.
  local held, odd = false, false
  for i = 1, #fields, 2 do
    local hold = string.match(fields[i], '^h:(.+)$')
    if hold then
      local deadline, mode, token, owner = string.match(fields[i + 1], '^(%d+) ([rw]) (%d+) (.*)$')
      held = held or deadline ~= nil
      odd = odd or not deadline
      deadline = tonumber(deadline)
      if deadline and deadline > now then
        state.holds[hold] = {deadline = deadline, mode = mode, token = tonumber(token), owner = owner}
        state.count = state.count + 1
        if mode == 'w' then
          state.writes = state.writes + 1
        else
          state.reads_of[owner] = (state.reads_of[owner] or 0) + 1
        end
        if deadline > state.latest then
          state.latest = deadline
        end
      else
        table.insert(expired, fields[i])
      end
    elseif fields[i] == 'writer' then
      state.writer = fields[i + 1]
    elseif fields[i] == 'token' then
      state.token = tonumber(fields[i + 1])
    elseif fields[i] == 'kind' then
      state.kind = fields[i + 1]
    elseif fields[i] ~= 'waiting' then
      odd = true
    end
  end
  if #fields > 0 and not state.kind and (odd or not held) then
    return nil, redis.error_reply('WRONGTYPE ' .. key .. ' holds a hash that is not a lock of holds')
  end
  if state.writes == 0 then
    if purge and state.writer then
      redis.call('HDEL', key, 'writer', 'token')
    end
    state.writer = false
    state.token = false
  end
  if #fields > 0 and not state.kind then
    state.kind = 'rwlock'
  end
  if purge then
    if state.count == 0 then
      if #fields > 0 then
        redis.call('DEL', key)
      end
    elseif #expired > 0 then
      call_in_slices('HDEL', key, expired)
    end
  end
  return state
end

local function hold_write(key, kind, mode, hold, value, owner, token)
  if mode == 'w' and kind == 'reentrant' then
    redis.call('HSET', key, 'kind', kind, 'h:' .. hold, value, 'writer', owner, 'token', token)
  elseif mode == 'w' then
    redis.call('HSET', key, 'h:' .. hold, value, 'writer', owner, 'token', token)
  elseif kind == 'reentrant' then
    redis.call('HSET', key, 'kind', kind, 'h:' .. hold, value)
  else
    redis.call('HSET', key, 'h:' .. hold, value)
  end
end

local function holds_find(keys, hold)
  local wrong = holds_not_ours(keys[1])
  if not wrong and keys[2] then
    wrong = queue_wrong_type(keys[2], keys[3], keys[4])
  end
  if wrong then
    return wrong
  end
  local now = server_ms()
  local state, wrong = holds_read(keys[1], now, true)
  if wrong then
    return wrong
  end
  return nil, now, state, state.holds[hold]
end

local function holds_mark_waiting(key, queue)
  if redis.call('EXISTS', queue) == 1 then
    redis.call('HSET', key, 'waiting', '1')
  end
end

local function holds_soonest(state, mode)
  local soonest = nil
  for _, hold in pairs(state.holds) do
    if (mode == 'w' or hold.mode == 'w') and (not soonest or hold.deadline < soonest) then
      soonest = hold.deadline
    end
  end
  return soonest
end

local function holds_expire_at(key, at)
  local set = redis.pcall('PEXPIREAT', key, at)
  if type(set) == 'table' and set.err then
    if redis.call('PTTL', key) == -1 then
      redis.call('DEL', key)
    end
    return refusal(set.err, 'pexpireat')
  end
  return nil
end

local function holds_expire(key, state)
  local latest = 0
  for _, held in pairs(state.holds) do
    if held.deadline > latest then
      latest = held.deadline
    end
  end
  return holds_expire_at(key, latest)
end

local function wake_front(queue, channel, state)
  if state.writes > 0 then
    return
  end
  local front = redis.call('ZRANGE', queue, 0, 63)
  for i, id in ipairs(front) do
    if string.sub(id, 1, 1) == 'w' then
      if i == 1 and state.count == 0 then
        wake(channel, id)
      end
      return
    end
    wake(channel, id)
  end
end
