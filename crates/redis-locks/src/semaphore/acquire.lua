-- acquire.lua: take permits of a semaphore, first come, first served (after the preludes
-- fence.lua: server_micros, next_token, epochs_wrong_type, epochs_record; lock.lua: wake,
-- wrong_kind; queue.lua; permits.lua).
--
-- KEYS[1]  the semaphore: a hash of N, the permits used and every holder with its lease end
--          (server ms) and permits, or a permit kept as a plain key. See permits.lua.
-- KEYS[2]  the fencing counter.
-- KEYS[3]  the queue (sorted set of waiter owner tokens by ticket).
-- KEYS[4]  the places (sorted set of waiter owner tokens by place-lease end, server ms).
-- KEYS[5]  the ticket counter.
-- ARGV[1]  the owner token (32 lowercase hex characters, '@' and its client's wake-up
--          address: see wake in lock.lua); it names this acquisition's permits.
-- ARGV[2]  how many permits (an integer, 1 <= ARGV[2] <= ARGV[3]).
-- ARGV[3]  N, the number of permits the caller opened the semaphore with (a positive
--          integer).
-- ARGV[4]  the lease in ms (a positive integer).
-- ARGV[5]  the place lease in ms; 0 means "try once": never join the queue, and take the
--          permits only if enough are free and nobody waits.
-- ARGV[6]  the wake channel.
-- KEYS[6]  optional, with ARGV[7]: the fencing counter's epochs (fence.lua).
-- ARGV[7]  optional: the name of the connection this script runs on, recorded in KEYS[6] on a
--          grant (the client's first attempt then trusts its pipelined INCR on that
--          connection: semaphore/first.rs). '' or absent leaves KEYS[6] alone.
--
-- A permit kept as a plain key (see permits.lua) is read as the hash it stands for and turned
-- into it before anything is written; its owner asking again is a re-grant (the way the first
-- attempt has a grant it could not number itself numbered).
--
-- Replies:
--   {1, token}  granted: ARGV[2] permits are ARGV[1]'s until now + ARGV[4] (server clock);
--               token is the new fencing token (fence.lua's next_token), one per grant. The
--               waiter left the queue; if permits are still free, the next waiter is woken.
--               Also the reply when ARGV[1] holds already (a retried request, or a grant that
--               came back too late): the lease is set again, with a new token, and the owner
--               keeps the permits it holds (ARGV[2] is not looked at then).
--   {0, ms}     not granted: too few permits are free; ms is how long until the earliest
--               holder's lease ends (when a permit comes back at the latest).
--   {0, -2}     not granted: permits are free but other waiters are ahead (they are served
--               first); the first of them is woken.
--               With ARGV[5] > 0 the caller now has a place in the queue (its old one if it
--               had one), leased until now + ARGV[5].
-- Errors (nothing written):
--   PERMITS <n>  the semaphore is in use with n permits, not ARGV[3].
--   WRONGTYPE <key> ...  a key holds another Redis type (a Mutex of the same name, say) or
--                        a hash that is no semaphore's (an RwLock's), or the fencing counter
--                        is not an integer, or KEYS[6] (with ARGV[7]) is not a sorted set.
--   NOPERM ...   the user may not run PEXPIRE (asked before anything is written).
--   others       as the server raised them (OOM, READONLY).

local owner, wanted, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local lease, place_lease, channel = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local epoch = ARGV[7] ~= nil and ARGV[7] ~= '' and ARGV[7]
local wrong = wrong_kind(KEYS[2], 'string', 'a semaphore') or
  (epoch and epochs_wrong_type(KEYS[6]))
if wrong then
  return wrong
end
local counter = redis.call('GET', KEYS[2])
if counter and not (string.match(counter, '^%-?%d+$') and string.len(counter) <= 19) then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' is not a fencing counter: not an integer')
end

local micros = server_micros()
local now = math.floor(micros / 1000)
local state
state, wrong = permits_open(KEYS[1], KEYS[3], KEYS[4], KEYS[5], now, limit)
if not state then
  return wrong
end
local used = state.used

local function grant(count)
  local token, err = next_token(KEYS[2], micros)
  if not token then
    return err
  end
  if epoch then
    epochs_record(KEYS[6], epoch, now)
  end
  state.holders[owner] = {deadline = now + lease, count = count}
  permits_write(KEYS[1], state, owner, string.format('%d %d', now + lease, count), 'limit',
    limit)
  return {1, token}
end

local held = state.holders[owner]
if held then
  -- A re-grant keeps the permits the owner holds, whatever ARGV[2] says now.
  local reply = grant(held.count)
  permits_keep(KEYS[1], KEYS[3], state, now)
  return reply
end

local head = queue_head(KEYS[3])
if (head == nil or head == owner) and used + wanted <= limit then
  state.used = used + wanted
  local reply = grant(wanted)
  if reply[1] ~= 1 then
    return reply
  end
  queue_leave(KEYS[3], KEYS[4], KEYS[5], owner)
  permits_keep(KEYS[1], KEYS[3], state, now)
  local next = queue_head(KEYS[3])
  if next and used + wanted < limit then
    -- Permits are left: the next in line may take them now.
    wake(channel, next)
  end
  return reply
end

if place_lease > 0 then
  queue_join(KEYS[3], KEYS[4], KEYS[5], owner, now, place_lease)
  permits_write(KEYS[1], state, 'limit', limit)
end
-- After the reclaim and the purge too: a hash nobody holds or waits for goes, a line gone
-- takes its mark along.
permits_keep(KEYS[1], KEYS[3], state, now)
if head and head ~= owner and used < limit then
  -- Permits are free, but the first waiter has not taken them: prod it.
  wake(channel, head)
  return {0, -2}
end
return {0, permits_first_lease(state, now)}
