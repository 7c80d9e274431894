-- spin.lua: keep the server busy (the busy-script fault of `redis-locks check`).
--
-- A read-only script that runs, reading the server's clock, until ARGV[1] microseconds have
-- passed; meanwhile (past busy-reply-threshold) every other client gets BUSY.
--
-- KEYS     none.
-- ARGV[1]  how long to spin, in microseconds.
--
-- Reply: 1, once the time has passed.

local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local deadline = now() + tonumber(ARGV[1])
while now() < deadline do
end
return 1
