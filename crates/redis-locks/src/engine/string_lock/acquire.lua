-- acquire.lua: take a Mutex if it is free, and number the acquisition (after the preludes
-- fence.lua, which defines server_micros and next_token, lock.lua, which defines the
-- waiter mark, and queue.lua, the queue). The waiting path calls it (a waiter marks the
-- lock so its release wakes it); the first, fast attempt of a `lock` sends `SET NX PX` +
-- `INCR` (+ the epoch checks below) instead and calls this script only for what the pipeline
-- cannot decide alone: a grant whose reply came back after its lease, a counter this server
-- has not vouched for on the caller's connection (see KEYS[3]), a held key without expiry.
--
-- KEYS[1]  the lock key: a string holding the owner token while the lock is held, marked
--          once a waiter has found it held (see "Replies" and lock.lua).
-- KEYS[2]  the fencing counter: an integer that only grows and never expires.
-- KEYS[3]  the counter's epochs: a sorted set of client connection names (CLIENT SETNAME, a
--          random 'redis-locks:<hex>' that each connection gets once), each scored with the
--          server time (ms) at which this script brought the counter up to the server clock
--          on that connection. A connection name lives only as long as its connection: it is
--          in no snapshot, AOF or replica, and a new connection (after a restart, a
--          reconnect, a failover to another server) starts unnamed. The fast attempt trusts
--          its INCR only when the name of the connection it ran on is in KEYS[3]: then this
--          server process brought the counter up to its clock on that connection, which has
--          stayed open since. Names older than an hour are dropped (and all but the 1024
--          newest), and the set expires an hour after its last write (an idle lock name then costs only its counter); a
--          missing name only sends that connection's next fast grant through this script.
-- ARGV[1]  the owner token of this acquisition (32 lowercase hex characters).
-- ARGV[2]  the lease in milliseconds (a positive integer).
-- ARGV[3]  optional; '1' marks the lock at once when granted (with_mark in lock.lua):
--          the caller has waiters of its own queued behind it, which then need not ask
--          Redis to be woken by its release.
-- ARGV[4]  optional; the name of the connection this script runs on: on a grant, added to
--          KEYS[3]. '' or absent leaves KEYS[3] alone.
-- KEYS[4]  optional, with KEYS[5] and KEYS[6]: the lock's queue of waiters, its place leases
--          and its ticket counter (see the queue in queue.lua).
-- ARGV[5]  optional; the caller's waiter id (shared by the waiters of the lock in its
--          process, new each time that process starts waiting for it): a
--          refusal gives it a place in the queue (or renews its place), so that a release
--          wakes it alone, in turn; a grant takes it out. '' or absent: no place.
-- ARGV[6]  with ARGV[5]: the place lease in milliseconds (a positive integer).
-- ARGV[7]  with ARGV[5]: the lock's wake channel, to prod the first waiter (see {0, -2}).
-- ARGV[8]  optional; a Redlock's proposed token (a positive integer below 2^53, the client's
--          clock in µs): a grant's token is then max(counter + 1, ARGV[8]) instead of
--          max(counter + 1, the server clock in µs), so that the nodes of a Redlock agree on
--          the token whenever their counters are behind the proposal (see the crate
--          documentation, "Redlock"). '' or absent: the server clock.
-- ARGV[9]  optional, with ARGV[5]; '1': a free lock is taken even with others ahead in the
--          queue (a Redlock's nodes: the majority of all nodes decides who holds, and a node
--          left free by a release that handed nothing over is anybody's). '' or absent: in
--          turn.
-- KEYS[7]  optional, with ARGV[5] and ARGV[10]: the lock's handover hash (waiter id ->
--          '<owner token> <nonce>'). A refusal registers ARGV[1] and ARGV[10] there under the
--          waiter id, together with the place it renews, so that a release finding this
--          waiter at the head of the queue hands the lock straight to ARGV[1] (see
--          release.lua) and names the attempt whose place lease the grant's lease ends with;
--          a grant takes the registration out. Absent: no handover.
-- ARGV[10] with KEYS[7]: this attempt's nonce (a decimal number, new per attempt of the
--          caller's line).
-- ARGV[11] optional, with ARGV[5]: the ticket a new place is numbered with, instead of the
--          ticket counter's next (a Redlock's waiter gives every node the same one, its
--          clock in µs when its line began to wait, so that the nodes order their lines
--          alike and a release on each hands over to the same waiter). '' or absent: the
--          counter.
--
-- Replies:
--   {1, token}  acquired; token is the new fencing token, max(counter + 1, server clock in
--               µs, or ARGV[8]) (see fence.lua). Also the reply when KEYS[1] already holds ARGV[1] (a
--               grant by the fast attempt, a retried request, or a release that handed the
--               lock to ARGV[1] whose wake-up the waiter did not hear): the lease is set
--               again and the grant takes a new token the same way.
--   {0, -2}     (with ARGV[5] only) free, but other waiters are ahead in the queue: the caller
--               keeps (or takes) its place, and the first waiter is woken.
--               (A waiter's grant with others still in the queue is marked at once, so that
--               its release wakes the next.)
--   {0, pttl}   held by another owner; pttl is its remaining lease in milliseconds,
--               or -1 if the key has no expiry (it was not written by this library).
--               A key with a lease is marked (APPEND of the mark; its TTL stays), so its
--               release publishes a wake-up, and with ARGV[5] the caller has a place in the
--               queue, which it skips while nobody
--               waits. A key without expiry is not ours and is left untouched.
-- Errors (a grant is taken back, so no lock is left held; the message names the key):
--   WRONGTYPE <key> ...  KEYS[1] is not a string (or is another primitive's plain key, a
--                        semaphore's permit or an RwLock's read hold: nothing is written), or KEYS[2] is not a
--                        string or not an integer (in the re-grant branch the caller's own
--                        key keeps its old lease, and the caller releases it), or KEYS[3]
--                        (with ARGV[4]) is not a sorted set; with ARGV[5], a queue key
--                        (KEYS[4] to KEYS[6]) or the handover hash (KEYS[7]) that this call
--                        writes holds another type: then nothing is written. A waiter that
--                        only renews its place in a held lock's line writes the ticket
--                        counter only when its TTL is due (queue_enter in queue.lua); a key
--                        without expiry (not
--                        ours, {0, -1}) makes no queue key read or written; every other
--                        waiting call looks at all of them.
--   others               as the server raised them (NOPERM, OOM, READONLY); the caller
--                        releases by owner token, in case anything was written.

-- The lock key, read once: every branch below decides on it (the script is atomic).
local current = redis.pcall('GET', KEYS[1])
if type(current) == 'table' then
  local kind = redis.call('TYPE', KEYS[1]).ok
  if kind ~= 'none' and kind ~= 'string' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a lock')
  end
  return current
end
-- A semaphore's permit or an RwLock's read hold kept as a plain key is no lock of this kind.
local other = plain_other(KEYS[1], current)
if other then
  return other
end

-- The common case first: the lock is free. SET PX writes the key with its lease at once.
local value = ARGV[1]
if ARGV[3] == '1' then
  value = with_mark(value)
end
-- The epochs are written only with ARGV[4].
if ARGV[4] and ARGV[4] ~= '' then
  local wrong = epochs_wrong_type(KEYS[3])
  if wrong then
    return wrong
  end
end

-- The queue, if the caller waits in it.
local waiter = ARGV[5]
if waiter == '' then
  waiter = nil
end
local handover = waiter and KEYS[7] and ARGV[10] and ARGV[10] ~= '' and KEYS[7]
local holder, marked = holder_in(current)
-- Held by another owner: a waiter only joins the line (when the key has a lease: one without
-- is not ours, and the line is left alone), and queue_enter looks at each queue key before it
-- writes it. Every other case may write any queue key: look at them all first.
local refused = current and holder ~= ARGV[1]
if waiter and not refused then
  local wrong = queue_wrong_type(KEYS[4], KEYS[5], KEYS[6]) or
    (handover and handover_wrong_type(handover))
  if wrong then
    return wrong
  end
end

-- A refused waiter keeps its place, and registers the owner token a release may hand the
-- lock to; nil, or a WRONGTYPE reply with nothing written.
local function stay_in_line(now)
  return queue_enter(KEYS[4], KEYS[5], KEYS[6], waiter, now, tonumber(ARGV[6]),
    handover, ARGV[1], ARGV[10], tonumber(ARGV[11] or ''))
end

local micros = server_micros()
-- What seeds the counter: the server clock, or a Redlock's proposal.
local seed = micros
if ARGV[8] and ARGV[8] ~= '' then
  seed = tonumber(ARGV[8])
end

-- A grant's token, and the epoch that vouches for the counter on the caller's connection.
local function grant_token()
  local token, err = next_token(KEYS[2], seed)
  if token and waiter then
    queue_leave(KEYS[4], KEYS[5], KEYS[6], waiter)
    if handover then
      redis.call('HDEL', handover, waiter)
    end
    -- Others still in line: their turn comes with this holder's release.
    if redis.call('EXISTS', KEYS[4]) == 1 then
      mark_waited(KEYS[1])
    end
  end
  if token and ARGV[4] and ARGV[4] ~= '' then
    epochs_record(KEYS[3], ARGV[4], math.floor(micros / 1000))
  end
  return token, err
end

-- A waiter takes a free lock only in its turn: if others wait ahead of it (woken, or about to
-- be), it keeps its place, and the first of them is prodded (its wake-up may be lost, or it
-- may be dead: then its place lease ends its turn).
if waiter and not current then
  local now = math.floor(micros / 1000)
  queue_purge(KEYS[4], KEYS[5], now)
  local head = queue_head(KEYS[4])
  if head and head ~= waiter and ARGV[9] ~= '1' then
    local wrong = stay_in_line(now)
    if wrong then
      return wrong
    end
    wake(ARGV[7], head)
    return {0, -2}
  end
end

if not current then
  redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
  local token, err = grant_token()
  if not token then
    -- A broken counter: take the lock back, so the error leaves nothing behind.
    redis.call('DEL', KEYS[1])
    return err
  end
  return {1, token}
end

if holder == ARGV[1] then
  if waiter then
    -- As for a free lock: a dead waiter's place must not keep the grant marked.
    queue_purge(KEYS[4], KEYS[5], math.floor(micros / 1000))
  end
  local token, err = grant_token()
  if not token then
    return err
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl >= 0 then
  if waiter then
    local wrong = stay_in_line(math.floor(micros / 1000))
    if wrong then
      return wrong
    end
  end
  if not marked then
    redis.call('APPEND', KEYS[1], WAITED)
  end
end
return {0, pttl}
