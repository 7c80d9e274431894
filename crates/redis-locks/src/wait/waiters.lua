-- waiters.lua: the shared prelude of every script that reads or writes a lock key with
-- waiters in mind; it is put in front of the mutex and fair scripts. It defines functions and
-- runs nothing by itself. The waiter mark and the wake-up are written here only.
--
-- The mark: a waiter that finds a lock held appends '+w' to the holder's value (its owner
-- token), so that the holder's release publishes a wake-up; a release nobody waits for
-- publishes nothing. The mark is never part of the owner token.
--
-- holder_of(key)
--   key      a lock key: a string holding an owner token, or absent.
--   Returns  the holder's owner token without the mark (false when the key is absent), and
--            whether the key is marked.
--
-- holder_in(value)
--   As holder_of, for a value of the lock key read already (false when it is absent).
--
-- owner_refusal(key, owner)
--   The owner check of release and extend: returns nil (and whether the key is marked) when
--   key holds owner's token; else the scripts' refusal, 0 (the key is gone) or -1 (another
--   owner's token).
--
-- server_ms()
--   The server's clock in ms (TIME), for place leases. Read it before writing anything.
--
-- mark_waited(key)
--   key      a held lock key with a lease. Appends the mark unless it is there; the key's
--            TTL stays.
--
-- with_mark(owner)
--   Returns  the value of a lock key held by owner and marked at once.
--
-- wake(channel, id, rest)
--   Wakes the waiter id: publishes id (followed by ' ' and rest, if given) on the lock's wake
--   channel, where every waiting client listens (see node/pubsub.rs) — or, when id ends in
--   '@<address>' (lowercase hex), on that client's own channel of the lock, channel .. ':<address>',
--   so that the wake-up reaches that one client instead of every client that waits.
--
-- wake_all(channel)
--   Publishes '*' on the lock's wake channel: every waiter of the lock looks again.
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
-- Where the client may run a script twice (a cluster client retries a request after a
-- broken connection, see RETRIED below), a release is given one more KEY, last: its
-- tombstone key '<companion prefix>:released:<ARGV[1]>' in the lock's slot (wait/mod.rs), so
-- that a second run of the release can tell that the first one released.
--
-- tombstone()
--   That key, when RETRIED and the last KEY is ARGV[1]'s tombstone; nil otherwise.
--
-- given(i)
--   KEYS[i] as the caller gave it for the script's own use: nil for the tombstone key. A
--   release tests its optional KEYS with it.
--
-- released_before()
--   The reply this release gave within the last RELEASED_MS, if it ran before (this call is
--   then its second run); nil otherwise, and always nil without a tombstone key.
--
-- remember_release(reply)
--   Records reply in the tombstone key for RELEASED_MS. Writes nothing without one.
--
-- wrong_kind(key, wanted, what)
--   Returns the error reply 'WRONGTYPE <key> holds a <type>, not <what>' when key exists with
--   another type than wanted (TYPE's name of it), else nil.
--
-- queue_wrong_type(queue, places, tickets)
--   Returns a 'WRONGTYPE <key> ...' error reply when one of the queue's keys holds another
--   type, else nil. Call it before writing anything.
--
-- checked(key, what, command, ...)
--   Runs a command that reads key (redis.pcall) and returns its reply; when the server
--   refuses it because key holds another type, returns nil and the reply
--   'WRONGTYPE <key> holds a <type>, not <what>' (another error: as the server raised it).
--   A read a script needs anyway checks the key's type this way, instead of a TYPE first.
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
-- queue_enter(queue, places, tickets, id, now, place_lease, handover, owner, nonce)
--   queue_purge at now, queue_join, then (with handover) handover_register(handover, id,
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
-- hand_over(key, handover, registered, fence, queue, places, tickets, channel, id, now, last)
--   key is held by the caller (a release) and id is the first waiter in the queue, purged at
--   now (server ms, read before anything was written; the fencing token is at least now in
--   µs, as next_token's clock seed); registered is id's field of the handover hash (HGET,
--   read before anything was written; false when absent); last, as queue_leave's. Needs
--   fence.lua's next_token (only the scripts that call hand_over put fence.lua first; in the
--   others the name is unresolved and never called).
--   If id registered an owner token: takes id out of the queue, writes key with that token
--   (marked, so its release hands on or wakes in turn) and a lease until id's place lease
--   ends, takes the next fencing token, wakes id with '<id> <owner> <nonce> <token>' (wake;
--   the nonce names the attempt whose place the lease ends with: the waiter counts its
--   lease from when it sent that attempt), and returns true. Returns false, having written
--   nothing, when id registered no token, has no place lease, or the fencing counter is
--   broken (the caller then wakes id, whose own attempt reports the counter).

local WAITED = '+w'
-- The publish command: node/script.rs makes this line SPUBLISH (sharded pub/sub, on the
-- shard of the lock's slot) in the form of each script that a cluster runs.
local PUBLISH = 'PUBLISH'
-- Whether the client may run a script a second time (a cluster's, after a broken
-- connection): node/script.rs makes this true in the cluster form, so that a second run of a
-- release finds the first one's tombstone instead of saying the lock is gone.
local RETRIED = false
-- How long a tombstone lasts: longer than any one request with its retries (the response
-- timeout bounds that).
local RELEASED_MS = 10000

local function holder_in(value)
  if not value then
    return false, false
  end
  if string.sub(value, -2) == WAITED then
    return string.sub(value, 1, -3), true
  end
  return value, false
end

local function holder_of(key)
  return holder_in(redis.call('GET', key))
end

local function owner_refusal(key, owner)
  local holder, marked = holder_of(key)
  if not holder then
    return 0, false
  end
  if holder ~= owner then
    return -1, false
  end
  return nil, marked
end

local function server_ms()
  local clock = redis.call('TIME')
  return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end

local function mark_waited(key)
  local value = redis.call('GET', key)
  if value and string.sub(value, -2) ~= WAITED then
    redis.call('APPEND', key, WAITED)
  end
end

local function with_mark(owner)
  return owner .. WAITED
end

local function wake(channel, id, rest)
  local address = string.match(id, '@([0-9a-f]+)$')
  if address then
    channel = channel .. ':' .. address
  end
  if rest then
    id = id .. ' ' .. rest
  end
  redis.call(PUBLISH, channel, id)
end

local function wake_all(channel)
  redis.call(PUBLISH, channel, '*')
end

local function tombstone()
  if not RETRIED or #KEYS < 2 then
    return nil
  end
  local last, suffix = KEYS[#KEYS], ':released:' .. ARGV[1]
  if string.sub(last, -#suffix) == suffix then
    return last
  end
  return nil
end

local function given(i)
  if i == #KEYS and tombstone() then
    return nil
  end
  return KEYS[i]
end

local function released_before()
  local key = tombstone()
  if not key then
    return nil
  end
  local reply = redis.call('GET', key)
  if reply then
    return tonumber(reply)
  end
  return nil
end

local function remember_release(reply)
  local key = tombstone()
  if key then
    redis.call('SET', key, reply, 'PX', RELEASED_MS)
  end
end

local function wrong_kind(key, wanted, what)
  local kind = redis.call('TYPE', key).ok
  if kind ~= 'none' and kind ~= wanted then
    return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. kind .. ', not ' .. what)
  end
  return nil
end

local function queue_wrong_type(queue, places, tickets)
  return wrong_kind(queue, 'zset', 'a queue') or wrong_kind(places, 'zset', 'a queue') or
    wrong_kind(tickets, 'string', 'a queue')
end

local function checked(key, what, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then
    if string.sub(reply.err, 1, 10) == 'WRONGTYPE ' then
      -- The key holds another type than the command's, so wrong_kind says which.
      return nil, wrong_kind(key, '', what)
    end
    return nil, redis.error_reply(reply.err)
  end
  return reply
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
local function queue_enter(queue, places, tickets, id, now, place_lease, handover, owner, nonce)
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
    (placed and tickets_due and wrong_kind(tickets, 'string', 'a queue'))
  if wrong then
    return wrong
  end
  local ticket = nil
  if not placed then
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
    last)
  local owner, nonce = string.match(registered or '', '^(%S+) (%S+)$')
  if not owner then
    return false
  end
  local place_ends = tonumber(redis.call('ZSCORE', places, id))
  if not place_ends then
    return false
  end
  local token = next_token(fence, now * 1000)
  if not token then
    return false
  end
  queue_leave(queue, places, tickets, id, last)
  redis.call('HDEL', handover, id)
  redis.call('SET', key, with_mark(owner), 'PX', math.max(place_ends - now, 1))
  wake(channel, id, owner .. ' ' .. nonce .. ' ' .. string.format('%d', token))
  return true
end
