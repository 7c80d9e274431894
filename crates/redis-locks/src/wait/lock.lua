-- lock.lua: the lock prelude, put in front of every script that reads or writes a lock key
-- (after token/fence.lua where a script numbers grants, before queue.lua where it waits in
-- line). It defines functions and runs nothing by itself. The owner checks, the waiter mark,
-- the wake-up and the release tombstone are written here only.
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
-- plain_other(key, value)
--   For a string lock key's value (false or nil when absent): the error reply
--   'WRONGTYPE <key> holds ...' when it is another primitive's plain key, else nil. Two kinds
--   of lock keep a lone holder as a plain key with a space in it, which an owner token never
--   has: a semaphore's permit, '<owner> <N>' (semaphore/permits.lua), and an RwLock's read
--   hold, '<hold> r <owner id>' (engine/holds/holds.lua).
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
--   key      a held lock key with a lease. Appends the mark unless it is there, or the key is
--            another primitive's plain key (see plain_other, which has a space; its own
--            scripts keep its waiters); the key's TTL stays.
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
-- checked(key, what, command, ...)
--   Runs a command that reads key (redis.pcall) and returns its reply; when the server
--   refuses it because key holds another type, returns nil and the reply
--   'WRONGTYPE <key> holds a <type>, not <what>' (another error: as the server raised it).
--   A read a script needs anyway checks the key's type this way, instead of a TYPE first.
--
-- call_in_slices(command, key, values)
--   Runs redis.call(command, key, <values>) for a list of any length, 1,000 values a call:
--   Lua's unpack gives at most about 8,000 values at once ("too many results to unpack").
--
-- refusal(err, command)
--   The error reply for err, an error a script got from redis.pcall(command, ...): when the
--   user may not run command (Redis 7.0 says "The user executing the script can't run this
--   command", Valkey "ACL failure in script: ... has no permissions to run"), 'NOPERM this
--   user has no permissions to run the '<command>' command', which the client reads as an
--   auth error; any other error as the server raised it.

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

local function plain_other(key, value)
  if not value or not string.find(value, ' ', 1, true) then
    return nil
  end
  if string.match(value, '^%S+ %d+$') then
    return redis.error_reply('WRONGTYPE ' .. key .. " holds a semaphore's permit, not a lock")
  end
  return redis.error_reply('WRONGTYPE ' .. key .. " holds an RwLock's read hold, not a lock")
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
  if value and string.sub(value, -2) ~= WAITED and not string.find(value, ' ', 1, true) then
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

local function refusal(err, command)
  if string.find(err, "can't run this command", 1, true) or
      string.find(err, 'no permissions to run', 1, true) then
    return redis.error_reply("NOPERM this user has no permissions to run the '" .. command .. "' command")
  end
  return redis.error_reply(err)
end

local function call_in_slices(command, key, values)
  for first = 1, #values, 1000 do
    redis.call(command, key, unpack(values, first, math.min(first + 999, #values)))
  end
end
