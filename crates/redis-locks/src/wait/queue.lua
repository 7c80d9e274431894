-- queue.lua: the queue prelude, put after lock.lua (whose wake, wrong_kind and checked it
-- calls) in the scripts that keep waiters in line or hand the lock over. It defines functions
-- and runs nothing by itself.
--
-- The queue: waiters that found the lock held wait in line, so that a release wakes one of
-- them, not all. Three companion keys of the lock:
--   queue    a sorted set: waiter id -> ticket (the order of arrival, as the server counts it)
--   places   a sorted set: waiter id -> the server time (ms) at which its place lease runs out
--   tickets  the ticket counter; it exists only while the queue is not empty
-- A waiter id is an owner token (a FairMutex waiter) or a client's waiter id (a Mutex waiter
-- stands for every waiter of the lock in its process; its id ends in '@<address>', so its
-- wake-ups go to that client alone, see wake). A waiter renews its place on every
-- attempt; one that died loses it when its place lease runs out.
--
-- queue_wrong_type(queue, places, tickets)
--   Returns a 'WRONGTYPE <key> ...' error reply when one of the queue's keys holds another
--   type, else nil. Call it before writing anything.
--
-- queue_purge(queue, places, now)
--   Removes the waiters whose place lease ran out by now (server ms).
--
-- queue_drop(queue, places, ids)
--   Removes the waiters ids (a list, as queue_look returns the ones whose lease ran out).
--
-- queue_look(queue, places, tickets, now)
--   Reads the line as it is at now (server ms), writing nothing: returns the waiters whose
--   place lease ran out (a list, for queue_drop), the first waiter after them (nil when none
--   is left) and whether another live waiter stands behind that one. The queue and the places
--   are read with checked; the ticket counter, which a caller deletes only when the line
--   empties (the first waiter leaves with nobody behind, or nobody live is left), is looked at
--   only when nobody live stands behind the first (or there is no first). A queue key of
--   another type returns nil and its 'WRONGTYPE <key> ...' reply instead.
--
-- queue_join(queue, places, tickets, id, now, place_lease)
--   Gives id a place at the back (its old place if it has one) leased until now + place_lease.
--   A key's TTL is raised to two place leases when less than one is left (or it has none):
--   so the queue's keys last at least as long as every live waiter's place (no place lease
--   runs longer than one place lease from its last renewal), and outlive their last live
--   waiter by at most two place leases.
--
-- queue_enter(queue, places, tickets, id, now, place_lease, handover, owner, nonce, ticket)
--   queue_purge at now, queue_join (a new place is numbered ticket when given, instead of the
--   ticket counter's INCR: a Redlock's waiter gives each node the same number, so that its
--   nodes order their lines alike), then (with handover) handover_register(handover, id,
--   owner, nonce, place_lease), for a script that has not looked at the queue's types: every
--   key it writes is read, or its type looked at, before its first write (the queue with
--   ZSCORE and the places with ZRANGEBYSCORE, both checked; the handover hash with TYPE; the
--   ticket counter, when it is written, by its INCR, which fails on another type before
--   anything is written, or with TYPE when only its TTL is due). The TTLs of the queue and
--   the places are read after the purge, which may empty them (the ZADDs then create them
--   anew, and they are raised). Returns nil when id joined, or an error reply with nothing
--   written: 'WRONGTYPE <key> ...', or the INCR's own error for a ticket counter that is a
--   string but not an integer.
--
-- queue_leave(queue, places, tickets, id, last)
--   Removes id from the queue (nothing if it has no place), and the ticket counter with the
--   queue's last waiter: last says whether id is the last one (as queue_look told), or, when
--   nil, the queue is looked at.
--
-- queue_head(queue)
--   Returns the id of the first waiter, or nil.
--
-- The handover (a Mutex's waiters only): a fourth companion key, a hash of waiter id ->
-- '<owner token> <nonce>', the token that waiter asks with and the nonce of the attempt
-- that last renewed its place. A release that finds such a waiter at the head of the
-- queue does not just wake it: it gives the lock to that owner token, with a new fencing
-- token and a lease that ends with the waiter's place lease (a dead waiter holds the lock
-- no longer than it would have held its place), and publishes the grant, so the waiter
-- holds the lock the moment the wake-up reaches it, without asking Redis again. The waiter
-- then extends the lease to its own. A grant whose wake-up is lost is found by the waiter's
-- next attempt, which asks with that same owner token (acquire.lua re-grants it).
--
-- handover_wrong_type(handover)
--   Returns a 'WRONGTYPE <key> ...' error reply when handover is neither absent nor a hash.
--
-- handover_register(handover, id, owner, nonce, place_lease)
--   Registers owner as the token the lock is handed to when id is at the head of the queue,
--   with the nonce of the attempt that renews id's place now; the hash's TTL is kept as the
--   queue's keys' are (queue_join).
--
-- handover_owner(handover, id)
--   The owner token id registered, or nil.
--
-- hand_over(key, handover, registered, fence, queue, places, tickets, channel, id, now, last,
--           seed)
--   key is held by the caller (a release) and id is the first waiter in the queue, purged at
--   now (server ms, read before anything was written; the fencing token is at least now in
--   µs, as next_token's clock seed, or at least seed when given: a Redlock's release proposes
--   its client clock in µs, so that its nodes hand over under one token); registered is id's
--   field of the handover hash (HGET, read before anything was written; false when absent);
--   last, as queue_leave's. Needs
--   fence.lua's next_token (only the scripts that call hand_over put fence.lua first; in the
--   others the name is unresolved and never called).
--   If id registered an owner token: takes id out of the queue, writes key with that token
--   (marked, so its release hands on or wakes in turn) and a lease until id's place lease
--   ends, takes the next fencing token, wakes id with '<id> <owner> <nonce> <token>' (wake;
--   the nonce names the attempt whose place the lease ends with: the waiter counts its
--   lease from when it sent that attempt), and returns true. Returns false, having written
--   nothing, when id registered no token, has no place lease, or the fencing counter is
--   broken (the caller then wakes id, whose own attempt reports the counter).

local function queue_wrong_type(queue, places, tickets)
  return wrong_kind(queue, 'zset', 'a queue') or wrong_kind(places, 'zset', 'a queue') or
    wrong_kind(tickets, 'string', 'a queue')
end

local function queue_drop(queue, places, ids)
  for _, gone in ipairs(ids) do
    redis.call('ZREM', queue, gone)
    redis.call('ZREM', places, gone)
  end
end

local function queue_purge(queue, places, now)
  queue_drop(queue, places, redis.call('ZRANGEBYSCORE', places, '-inf', now))
end

local function queue_look(queue, places, tickets, now)
  local expired, err = checked(places, 'a queue', 'ZRANGEBYSCORE', places, '-inf', now)
  if not expired then
    return nil, err
  end
  -- The first live waiter and the one behind it are among the first #expired + 2.
  local firsts
  firsts, err = checked(queue, 'a queue', 'ZRANGE', queue, 0, #expired + 1)
  if not firsts then
    return nil, err
  end
  local gone = {}
  for _, id in ipairs(expired) do
    gone[id] = true
  end
  local head, behind = nil, false
  for _, id in ipairs(firsts) do
    if not gone[id] then
      if head then
        behind = true
        break
      end
      head = id
    end
  end
  local wrong = not behind and wrong_kind(tickets, 'string', 'a queue')
  if wrong then
    return nil, wrong
  end
  return expired, head, behind
end

-- Whether a queue key's TTL is to be raised (see queue_join): less than one place lease left,
-- or none (-1), or no key yet (-2).
local function ttl_due(key, place_lease)
  return redis.call('PTTL', key) < place_lease
end

-- Which of the queue's keys a join raises the TTL of; tickets_due, when given, is the ticket
-- counter's, read already.
local function queue_due(queue, places, tickets, place_lease, tickets_due)
  local due = {[queue] = ttl_due(queue, place_lease), [places] = ttl_due(places, place_lease)}
  if tickets_due == nil then
    tickets_due = ttl_due(tickets, place_lease)
  end
  due[tickets] = tickets_due
  return due
end

-- Raises the TTL of the queue's keys that queue_due found due to two place leases.
local function queue_raise(queue, places, tickets, due, place_lease)
  for _, key in ipairs({queue, places, tickets}) do
    if due[key] then
      redis.call('PEXPIRE', key, 2 * place_lease)
    end
  end
end

local function queue_join(queue, places, tickets, id, now, place_lease)
  local due = queue_due(queue, places, tickets, place_lease)
  if not redis.call('ZSCORE', queue, id) then
    redis.call('ZADD', queue, redis.call('INCR', tickets), id)
  end
  redis.call('ZADD', places, now + place_lease, id)
  queue_raise(queue, places, tickets, due, place_lease)
end

local function queue_leave(queue, places, tickets, id, last)
  redis.call('ZREM', queue, id)
  redis.call('ZREM', places, id)
  if last == nil then
    last = redis.call('EXISTS', queue) == 0
  end
  if last then
    redis.call('DEL', tickets)
  end
end

local function queue_head(queue)
  return redis.call('ZRANGE', queue, 0, 0)[1]
end

local function handover_wrong_type(handover)
  return wrong_kind(handover, 'hash', 'a handover hash')
end

local function handover_register(handover, id, owner, nonce, place_lease)
  local due = ttl_due(handover, place_lease)
  redis.call('HSET', handover, id, owner .. ' ' .. nonce)
  if due then
    redis.call('PEXPIRE', handover, 2 * place_lease)
  end
end

-- (Defined after handover_register, which it calls.)
local function queue_enter(queue, places, tickets, id, now, place_lease, handover, owner, nonce,
    ticket)
  local placed, err = checked(queue, 'a queue', 'ZSCORE', queue, id)
  if err then
    return err
  end
  local expired
  expired, err = checked(places, 'a queue', 'ZRANGEBYSCORE', places, '-inf', now)
  if not expired then
    return err
  end
  for _, gone in ipairs(expired) do
    if gone == id then
      placed = false
    end
  end
  -- The ticket counter's TTL decides whether its type must be looked at (a renewal does not
  -- write it otherwise); the queue's and the places' are read after the drop below, which may
  -- empty them, and then the ZADDs create them anew.
  local tickets_due = ttl_due(tickets, place_lease)
  local wrong = (handover and handover_wrong_type(handover)) or
    ((placed or ticket) and tickets_due and wrong_kind(tickets, 'string', 'a queue'))
  if wrong then
    return wrong
  end
  if placed then
    ticket = nil
  elseif not ticket then
    -- The first write: another type fails it before anything is written.
    ticket, err = checked(tickets, 'a queue', 'INCR', tickets)
    if err then
      return err
    end
  end
  queue_drop(queue, places, expired)
  local due = queue_due(queue, places, tickets, place_lease, tickets_due)
  if ticket then
    redis.call('ZADD', queue, ticket, id)
  end
  redis.call('ZADD', places, now + place_lease, id)
  queue_raise(queue, places, tickets, due, place_lease)
  if handover then
    handover_register(handover, id, owner, nonce, place_lease)
  end
  return nil
end

local function handover_owner(handover, id)
  local registered = redis.call('HGET', handover, id)
  return registered and string.match(registered, '^(%S+) ')
end

local function hand_over(key, handover, registered, fence, queue, places, tickets, channel, id, now,
    last, seed)
  local owner, nonce = string.match(registered or '', '^(%S+) (%S+)$')
  if not owner then
    return false
  end
  local place_ends = tonumber(redis.call('ZSCORE', places, id))
  if not place_ends then
    return false
  end
  local token = next_token(fence, seed or now * 1000)
  if not token then
    return false
  end
  queue_leave(queue, places, tickets, id, last)
  redis.call('HDEL', handover, id)
  redis.call('SET', key, with_mark(owner), 'PX', math.max(place_ends - now, 1))
  wake(channel, id, owner .. ' ' .. nonce .. ' ' .. string.format('%d', token))
  return true
end
