-- permits.lua: the prelude of the semaphore's scripts (after lock.lua and queue.lua). It
-- defines functions and runs nothing by itself.
--
-- A semaphore `K` with N permits keeps, all in K's slot:
--   holders  K itself: a sorted set of owner token -> the server time (ms) at which that
--            holder's lease ends. Its TTL is the latest of those (so it never outlives its
--            last holder, and never lives without a TTL).
--   permits  a hash: field 'limit' -> N, field 'used' -> the permits of every holder in the
--            holders key (those whose lease ended but who are not reclaimed yet too: never
--            less than the truth, so the fast paths, acquire_first.lua and release_first.lua,
--            may trust it), and owner token -> how many permits it holds. It lives as long as a
--            holder or a waiter does (then the next acquirer's N counts).
--   fence    the fencing counter (fence.lua): every grant takes the next token.
--   queue, places, tickets: the line of waiters (queue.lua), first come, first served.
--
-- permits_reclaim(holders, permits, now)
--   Removes every holder whose lease ended by now (server ms), and the count of every
--   holder that is gone: its permits come back. This is the only place permits come back
--   without a release. Afterwards the hash counts exactly the live holders, and 'used' is
--   their sum (written when the hash exists). Returns that sum.
--
-- permits_limit(permits)
--   The stored N, or nil when nobody holds or waits.
--
-- permits_keep(holders, permits, queue, now)
--   Sets the TTLs after a write: holders to its latest lease, permits to the longer of that
--   and the queue's TTL; deletes the permits hash when nobody holds or waits any more.
--
-- permits_first_lease(holders, now)
--   The ms until the earliest holder's lease ends (when a permit may come back at the
--   latest), or -2 when nobody holds.

local function permits_reclaim(holders, permits, now)
  local ended = redis.call('ZRANGEBYSCORE', holders, '-inf', now)
  for _, owner in ipairs(ended) do
    redis.call('ZREM', holders, owner)
  end
  -- The counts of holders that are gone: those just removed, and those of a holders key
  -- that expired as a whole (its TTL is its latest lease) while the hash lived on for the
  -- waiters.
  local fields = redis.call('HGETALL', permits)
  local used, recorded = 0, nil
  for i = 1, #fields, 2 do
    local owner = fields[i]
    if owner == 'used' then
      recorded = tonumber(fields[i + 1])
    elseif owner ~= 'limit' then
      if redis.call('ZSCORE', holders, owner) then
        used = used + tonumber(fields[i + 1])
      else
        redis.call('HDEL', permits, owner)
      end
    end
  end
  if #fields > 0 and recorded ~= used then
    redis.call('HSET', permits, 'used', used)
  end
  return used
end

local function permits_limit(permits)
  return tonumber(redis.call('HGET', permits, 'limit'))
end

local function permits_keep(holders, permits, queue, now)
  local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
  local held = 0
  if last[2] then
    held = math.max(tonumber(last[2]) - now, 1)
    redis.call('PEXPIRE', holders, held)
  end
  local keep = math.max(held, redis.call('PTTL', queue))
  if keep > 0 then
    redis.call('PEXPIRE', permits, keep)
  else
    redis.call('DEL', permits)
  end
end

local function permits_first_lease(holders, now)
  local first = redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')
  if not first[2] then
    return -2
  end
  return math.max(tonumber(first[2]) - now, 0)
end
