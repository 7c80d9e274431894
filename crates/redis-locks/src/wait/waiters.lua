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
-- mark_waited(key)
--   key      a held lock key with a lease. Appends the mark unless it is there; the key's
--            TTL stays.
--
-- with_mark(owner)
--   Returns  the value of a lock key held by owner and marked at once.
--
-- wake(channel, payload)
--   Publishes payload on the lock's wake channel: an owner token wakes only the waiter
--   holding it (see node/pubsub.rs).
--
-- wake_all(channel)
--   Publishes '*' on the lock's wake channel: every waiter of the lock looks again.

local WAITED = '+w'

local function holder_of(key)
  local value = redis.call('GET', key)
  if not value then
    return false, false
  end
  if string.sub(value, -2) == WAITED then
    return string.sub(value, 1, -3), true
  end
  return value, false
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

local function wake(channel, payload)
  redis.call('PUBLISH', channel, payload)
end

local function wake_all(channel)
  wake(channel, '*')
end
