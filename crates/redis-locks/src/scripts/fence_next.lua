-- fence_next.lua: the fencing token of a Mutex's fast first attempt, sent in one pipeline
-- after `SET K owner NX PX lease` (after the fence.lua prelude, which defines next_token).
--
-- KEYS[1]  the fencing counter: an integer that only grows and never expires.
--
-- Replies:
--   token  max(counter + 1, server clock in µs), now stored in KEYS[1]. A refused SET takes
--          a token too: tokens only need to grow from one holder to the next.
-- Errors (nothing written):
--   WRONGTYPE <key> ...  KEYS[1] is not a string, or not an integer.
--   others               as the server raised them (NOPERM, OOM, READONLY).

local token, err = next_token(KEYS[1])
if not token then
  return err
end
return token
