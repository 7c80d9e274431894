-- break.lua: frees a lock on purpose, whatever its kind (after the preludes fence.lua:
-- server_micros, next_token; lock.lua: holder_of, wake_all, call_in_slices). For an operator
-- whose holder died without releasing, or hung: `redis-locks break NAME`.
--
-- KEYS[1]  the lock key: a string (a Mutex, a FairMutex, a Redlock's node; or a semaphore's
--          permit kept as a plain key, '<owner> <N>', or an RwLock's read hold kept as one,
--          '<hold> r <owner id>'), a hash of holds (an RwLock, a
--          ReentrantMutex), a semaphore's hash (with 'limit': see semaphore/permits.lua), or
--          absent.
-- KEYS[2]  the fencing counter.
-- KEYS[3]  the broken mark: a set of the owner tokens this script took the lock from.
-- ARGV[1]  the wake channel.
--
-- In this order, so that an error leaves everything as it was:
--   1. the fencing counter goes past every token handed out: max(counter + 1, the server clock
--      in µs), as a grant's next_token would; a holder that was not dead after all then has
--      its fenced writes refused once the next holder writes;
--   2. every holder's owner token (for a hash of holds, each hold's id; for a semaphore, each
--      holder's field) joins the broken mark, which lives 60 s longer than the lock key
--      would have (so every holder's next renewal, due before its lease ends, finds it and
--      says it was broken);
--   3. the lock key goes (with a semaphore's holders and count);
--   4. every waiter is woken ('*' on the wake channel).
--
-- Replies:
--   {kind, token, holder...}  broken: kind is 'mutex' (a string key), 'rwlock' (its hash, or
--                             a read hold kept as a plain key), 'reentrant' or 'semaphore'
--                             (its hash, or a permit kept as a plain key);
--                             token the fencing counter now; each holder its owner token (a
--                             string key, a semaphore) or '<mode> <owner id>' (a hold).
--   {'free', counter}         nothing held (no key, or a semaphore's hash kept only for its
--                             waiters): nothing written; counter is the fencing counter (0
--                             when absent).
-- Errors (nothing written):
--   WRONGTYPE <key> ...  the lock key is another Redis type, or a hash that is no lock of
--                        holds nor a semaphore; the counter is not an integer.

local kind = redis.call('TYPE', KEYS[1]).ok
local holders, marks = {}, {}
if kind == 'none' then
  local counter, err = read_counter(KEYS[2])
  if not counter then
    return err
  end
  return {'free', counter}
elseif kind == 'string' then
  -- A semaphore's permit kept as a plain key has a space before its N, an RwLock's read hold
  -- kept as one a space on either side of its mode; an owner token has none.
  local value = redis.call('GET', KEYS[1])
  local plain = string.match(value, '^(%S+) %d+$')
  local hold, owner = string.match(value, '^(%S+) r (.+)$')
  if plain then
    holders[1], marks[1] = plain, plain
    kind = 'semaphore'
  elseif hold then
    holders[1], marks[1] = 'r ' .. owner, hold
    kind = 'rwlock'
  else
    local holder = holder_of(KEYS[1])
    holders[1], marks[1] = holder, holder
    kind = 'mutex'
  end
elseif kind == 'hash' and redis.call('HGET', KEYS[1], 'limit') then
  -- A semaphore: every field but its N, its count and its waiters' mark is a holder.
  local fields = redis.call('HGETALL', KEYS[1])
  for i = 1, #fields, 2 do
    local field = fields[i]
    if field ~= 'limit' and field ~= 'used' and field ~= 'waiting' then
      marks[#marks + 1] = field
    end
  end
  holders = marks
  kind = 'semaphore'
  if #marks == 0 then
    -- Only waiters (the hash keeps N for them): nothing is held, nothing to break.
    local counter, err = read_counter(KEYS[2])
    if not counter then
      return err
    end
    return {'free', counter}
  end
elseif kind == 'hash' then
  -- A ReentrantMutex's hash has kind 'reentrant'; an RwLock's has none (or 'rwlock', from
  -- an earlier version), and then every field must be an RwLock's (see holds.lua).
  local named = redis.call('HGET', KEYS[1], 'kind')
  kind = named or 'rwlock'
  -- (Without a kind, a hash with no hold is no lock either: these scripts never leave one.)
  local ours = (kind == 'rwlock' or kind == 'reentrant')
  local fields = redis.call('HGETALL', KEYS[1])
  for i = 1, #fields, 2 do
    local hold = string.match(fields[i], '^h:(.+)$')
    local mode, owner = string.match(fields[i + 1], '^%d+ ([rw]) %d+ (.*)$')
    if hold and mode then
      marks[#marks + 1] = hold
      holders[#holders + 1] = mode .. ' ' .. owner
    elseif not named and fields[i] ~= 'writer' and fields[i] ~= 'token' and
        fields[i] ~= 'waiting' then
      ours = false
    end
  end
  if not ours or (not named and #marks == 0) then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a hash that is not a lock')
  end
else
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a lock')
end

local token, err = next_token(KEYS[2], server_micros())
if not token then
  return err
end
local left = math.max(redis.call('PTTL', KEYS[1]), 0)
if #marks > 0 then
  call_in_slices('SADD', KEYS[3], marks)
  local mark_left = redis.call('PTTL', KEYS[3])
  redis.call('PEXPIRE', KEYS[3], math.max(left + 60000, mark_left))
end
redis.call('DEL', KEYS[1])
wake_all(ARGV[1])
local reply = {kind, token}
for _, holder in ipairs(holders) do
  reply[#reply + 1] = holder
end
return reply
