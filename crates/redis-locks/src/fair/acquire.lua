-- acquire.lua: take a FairMutex in first-come, first-served order (after the preludes
-- fence.lua, which defines server_micros and next_token, lock.lua: holder_in, wake; and
-- queue.lua: the queue).
--
-- Waiters queue in a sorted set ordered by a ticket the server hands out, so the order is
-- the server's, not the clients' clocks. Each waiter holds its place with a short place
-- lease that it renews on every attempt; a waiter that dies loses its place when that lease
-- runs out. Only the head of the queue may take a free lock.
--
-- KEYS[1]  the lock key: a string holding the owner token while held.
-- KEYS[2]  the fencing counter: an integer that only grows and never expires.
-- KEYS[3]  the queue: sorted set, member = waiter's owner token, score = its ticket.
-- KEYS[4]  the places: sorted set, member = waiter's owner token, score = the server time
--          (ms) at which its place lease runs out.
-- KEYS[5]  the ticket counter: exists only while the queue is not empty.
-- ARGV[1]  the waiter's owner token (32 lowercase hex characters, '@' and its client's
--          wake-up address: see wake in lock.lua); it becomes the lock's
--          owner token when the lock is granted.
-- ARGV[2]  the lease in milliseconds (a positive integer).
-- ARGV[3]  the place lease in milliseconds; 0 means "try once": never join the queue, and
--          take the lock only if it is free and nobody waits.
-- ARGV[4]  the wake channel: when the lock is free but its head waiter has not taken it,
--          the head's owner token is published there, to prod it.
-- KEYS[6]  optional, with ARGV[5]: the lock's handover hash (see queue.lua). A refusal
--          that gives the waiter a place registers ARGV[1] and this attempt's nonce ARGV[5]
--          there, so that a release finding the waiter first in line hands the lock straight
--          to it (release.lua); a grant takes the registration out.
-- ARGV[5]  with KEYS[6]: this attempt's nonce (a decimal number, new per attempt of the wait).
--
-- Replies:
--   {1, token}  acquired; token is the new fencing token: max(counter + 1, server clock in
--               µs), stored in KEYS[2], so a counter that came back old after a restart or a
--               failover is never reused (see fence.lua). The waiter has left the queue. Also the reply when KEYS[1]
--               already holds ARGV[1] (a retried request, or a release that handed the lock
--               to ARGV[1] whose wake-up the waiter did not hear): the lease is set again and
--               the grant takes a new token the same way.
--   {0, pttl}   not acquired; pttl is the holder's remaining lease in ms, -1 if the lock key
--               has no expiry, -2 if the lock is free but another waiter is ahead.
--               With ARGV[3] > 0 the waiter now has a place in the queue (its old place, if
--               it had one), leased until now + ARGV[3], and a held key with a lease is
--               marked (see lock.lua), so that a Mutex holder of the same name wakes the
--               line too.
-- Errors (nothing written):
--   WRONGTYPE <key> ...  that key holds another Redis type, or KEYS[1] is another
--                        primitive's plain key (see plain_other in lock.lua), or KEYS[2] is a string
--                        that is not an integer.
--   others               as the server raised them (NOPERM, OOM, READONLY).

local owner, lease, place_lease, channel = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local handover = KEYS[6] and ARGV[5] and ARGV[5] ~= '' and KEYS[6]
local wanted = {'string', 'string', 'zset', 'zset', 'string', 'hash'}
for i = 1, (handover and 6) or 5 do
  local kind = redis.call('TYPE', KEYS[i]).ok
  if kind ~= 'none' and kind ~= wanted[i] then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. kind)
  end
end
-- A semaphore's permit or an RwLock's read hold kept as a plain key is no lock of this kind
-- (its line is the other primitive's: a FairMutex must not join it).
local current = redis.call('GET', KEYS[1])
local other = plain_other(KEYS[1], current)
if other then
  return other
end
local counter = redis.call('GET', KEYS[2])
if counter and not (string.match(counter, '^%-?%d+$') and string.len(counter) <= 19) then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' is not a fencing counter: not an integer')
end

local micros = server_micros()
local now = math.floor(micros / 1000)

-- Waiters whose place lease ran out lose their place.
queue_purge(KEYS[3], KEYS[4], now)

-- A Mutex waiter's mark is not part of the owner token (holder_in strips it).
local holder = holder_in(current)
if holder == owner then
  local token, err = next_token(KEYS[2], micros)
  if not token then
    return err
  end
  redis.call('PEXPIRE', KEYS[1], lease)
  if handover then
    redis.call('HDEL', handover, owner)
  end
  return {1, token}
end

local head = queue_head(KEYS[3])
if not holder and (head == nil or head == owner) then
  -- The token first: if the counter cannot give one, nothing else is written.
  local token, err = next_token(KEYS[2], micros)
  if not token then
    return err
  end
  queue_leave(KEYS[3], KEYS[4], KEYS[5], owner)
  if handover then
    redis.call('HDEL', handover, owner)
  end
  redis.call('SET', KEYS[1], owner, 'PX', lease)
  return {1, token}
end

if place_lease > 0 then
  queue_join(KEYS[3], KEYS[4], KEYS[5], owner, now, place_lease)
  if handover then
    handover_register(handover, owner, owner, ARGV[5], place_lease)
  end
end

if not holder then
  wake(channel, head)
  return {0, -2}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl >= 0 and place_lease > 0 then
  -- Held by a Mutex grant of the same name, say, which marks nothing by itself: mark it,
  -- so that its release wakes the line.
  mark_waited(KEYS[1])
end
return {0, pttl}
