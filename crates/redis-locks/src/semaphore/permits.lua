-- permits.lua: the prelude of the semaphore's scripts (after lock.lua and queue.lua). It
-- defines functions and runs nothing by itself.
--
-- A semaphore `K` with N permits is one hash, K itself, in K's slot beside its fencing
-- counter and its line of waiters:
--   'limit'   N.
--   'used'    the permits of every holder in the hash (those whose lease ended but who are
--             not reclaimed yet too: never less than the truth, so the fast paths,
--             acquire_first.lua and release_first.lua, may trust it).
--   'waiting' '1' while the line lives: permits_keep, which ends every slow path (the only
--             one that lets a waiter join), writes it then and takes it away once the line
--             is gone. Without it nobody waits, so a fast release need not look at the queue.
--   <owner>   one field per holder, named by its owner token: '<deadline> <permits>', the
--             server time (ms) at which its lease ends and how many permits it holds.
-- The hash's TTL is at least its latest holder's lease and at least the queue's TTL, so it
-- never lives without one, and it lasts while a waiter may come back for the N it stores.
-- It goes when nobody holds or waits (then the next acquirer's N counts). Beside it:
--   fence    the fencing counter (fence.lua): every grant takes the next token.
--   epoch    the counter's epochs (fence.lua): the connections on which the first attempt
--            may trust its pipelined INCR.
--   queue, places, tickets: the line of waiters (queue.lua), first come, first served.
--
-- A permit kept as a plain key: while nobody else holds the semaphore or waits, one holder of
-- one permit may keep it as a string instead, K = '<owner> <N>' (matched by
-- '^(%S+) (%d+)$' in every script) with the holder's lease as its TTL, written by the
-- client's first attempt (SET NX PX, no script: semaphore/first.rs). It is held while the
-- key exists. Every script reads it as the hash it stands for (permits_read), and every slow
-- path turns it into the hash before it writes (permits_open): the two forms never live at
-- once.
--
-- permits_may_expire(key)
--   nil when the user may set the hash's expiry, else the NOPERM reply (refusal in lock.lua).
--   A slow path asks before it writes anything, so that its expiry, set last, is never
--   refused after a write (no key is left without a TTL). It changes nothing: 'PEXPIRE key
--   1 GT' only ever raises a TTL shorter than 1 ms.
--
-- permits_plain(value)
--   The owner and N of a permit kept as a plain key, from the key's value (nil for any other
--   value: a Mutex's owner token has no space).
--
-- permits_read(key, now)
--   Reads the hash, writing nothing: {limit, used (the live holders' permits), recorded (the
--   stored 'used'), marked ('waiting' is there), holders (owner -> {deadline, count}, live
--   ones only), ended (the owners whose lease ended by now), exists, plain (the owner of a
--   permit kept as a plain key, read as the hash it stands for: held while the key exists,
--   its deadline now + the key's PTTL)}. Or nil and a WRONGTYPE error reply when the key is
--   not a semaphore's (another type, a string that is no permit, or a hash without 'limit').
--
-- permits_open(key, queue, places, tickets, now, limit)
--   The start of every slow path, in this order so that a refusal writes nothing: asks that
--   the hash's expiry may be set (permits_may_expire), checks the line's key types, reads the
--   hash (permits_read) and, with limit given, refuses another stored N ('PERMITS <n>');
--   then turns a permit kept as a plain key into the hash (same holder, deadline, N and TTL),
--   reclaims the ended holders (permits_reclaim) and purges lapsed places from the line.
--   Returns the state, or nil and the error reply.
--
-- permits_reclaim(key, state)
--   Removes the holders whose lease ended (their permits come back: the only place permits
--   come back without a release) and writes 'used' as the live holders' permits.
--
-- permits_write(key, state, ...)
--   HSETs the field/value pairs given and 'used' as state.used (the caller's count).
--
-- permits_keep(key, queue, state, now)
--   Ends every slow-path write: sets the TTL to the longer of the latest live lease and the
--   queue's TTL; writes the 'waiting' mark while the queue lives and takes it away when the
--   queue is gone; deletes the hash when nobody holds or waits any more.
--
-- permits_first_lease(state, now)
--   The ms until the earliest holder's lease ends (when a permit may come back at the
--   latest), or -2 when nobody holds.

local function permits_may_expire(key)
  local probe = redis.pcall('PEXPIRE', key, 1, 'GT')
  if type(probe) == 'table' and probe.err then
    return refusal(probe.err, 'pexpire')
  end
  return nil
end

local function permits_plain(value)
  if type(value) ~= 'string' then
    return nil
  end
  local owner, limit = string.match(value, '^(%S+) (%d+)$')
  return owner, tonumber(limit)
end

local function permits_read(key, now)
  local fields, wrong = checked(key, 'a semaphore', 'HGETALL', key)
  if not fields then
    local owner, limit = permits_plain(redis.pcall('GET', key))
    local left = owner and redis.call('PTTL', key) or -1
    if left < 0 then
      return nil, wrong
    end
    -- Held while the key exists (its lease ends with it): under a millisecond left, it
    -- ends a millisecond from now at the latest.
    return {limit = limit, used = 1, recorded = 1, marked = false,
      holders = {[owner] = {deadline = now + math.max(left, 1), count = 1}}, ended = {},
      exists = true, plain = owner}
  end
  local state = {limit = nil, used = 0, recorded = nil, marked = false, holders = {},
    ended = {}, exists = #fields > 0}
  for i = 1, #fields, 2 do
    local field, value = fields[i], fields[i + 1]
    if field == 'limit' then
      state.limit = tonumber(value)
    elseif field == 'used' then
      state.recorded = tonumber(value)
    elseif field == 'waiting' then
      state.marked = true
    else
      local deadline, count = string.match(value, '^(%d+) (%d+)$')
      if not deadline then
        return nil, redis.error_reply('WRONGTYPE ' .. key .. ' holds a hash that is not a semaphore')
      end
      deadline, count = tonumber(deadline), tonumber(count)
      if deadline > now then
        state.holders[field] = {deadline = deadline, count = count}
        state.used = state.used + count
      else
        state.ended[#state.ended + 1] = field
      end
    end
  end
  if state.exists and not state.limit then
    return nil, redis.error_reply('WRONGTYPE ' .. key .. ' holds a hash that is not a semaphore')
  end
  return state
end

local function permits_reclaim(key, state)
  call_in_slices('HDEL', key, state.ended)
  state.ended = {}
  if state.exists and state.recorded ~= state.used then
    redis.call('HSET', key, 'used', state.used)
    state.recorded = state.used
  end
end

local function permits_open(key, queue, places, tickets, now, limit)
  local wrong = permits_may_expire(key) or queue_wrong_type(queue, places, tickets)
  if wrong then
    return nil, wrong
  end
  local state
  state, wrong = permits_read(key, now)
  if not state then
    return nil, wrong
  end
  if limit and state.limit and state.limit ~= limit then
    return nil, redis.error_reply('PERMITS ' .. state.limit)
  end
  if state.plain then
    local held = state.holders[state.plain]
    redis.call('DEL', key)
    redis.call('HSET', key, state.plain, string.format('%d 1', held.deadline), 'used', 1,
      'limit', state.limit)
    redis.call('PEXPIRE', key, held.deadline - now)
    state.plain = nil
  end
  permits_reclaim(key, state)
  queue_purge(queue, places, now)
  return state
end

local function permits_write(key, state, ...)
  redis.call('HSET', key, 'used', state.used, ...)
  state.recorded, state.exists = state.used, true
end

local function permits_keep(key, queue, state, now)
  local latest = 0
  for _, held in pairs(state.holders) do
    latest = math.max(latest, held.deadline)
  end
  local held = latest > now and latest - now or 0
  local waits = redis.call('PTTL', queue)
  if held == 0 and waits <= 0 then
    redis.call('DEL', key)
    return
  end
  if not state.exists then
    return
  end
  if waits <= 0 and state.marked then
    redis.call('HDEL', key, 'waiting')
  elseif waits > 0 and not state.marked then
    redis.call('HSET', key, 'waiting', '1')
  end
  redis.call('PEXPIRE', key, math.max(held, waits))
end

local function permits_first_lease(state, now)
  local first = nil
  for _, held in pairs(state.holders) do
    if not first or held.deadline < first then
      first = held.deadline
    end
  end
  if not first then
    return -2
  end
  return math.max(first - now, 0)
end
