-- Prelude (prepended to the scripts that name it in their "Uses" line; the
-- preludes that need it say so): the server's clock, the only clock any
-- script reads (a client's clock never decides a lease).
-- KEYS     none
-- ARGV     none
-- Returns  nothing; defines
--   now_ms() -> the server's clock in whole milliseconds (what leases and
--     deadlines are scored in)
--   now_us() -> the server's clock in microseconds (arrival order, fences
--     drawn from the clock)
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
