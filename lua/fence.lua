-- Prelude (prepended to the scripts that name it in their "Uses" line):
-- fencing tokens from a counter that does not outlive the name's activity.
-- KEYS     none of its own (callers pass the counter's key)
-- ARGV     none of its own
-- Returns  nothing; defines
--   next_fence(counter, ttl_ms) -> fence
--     The counter plus one while it exists; once it has lapsed (nobody held
--     or waited for the name for a while), the server's clock in
--     microseconds. Every fence is at most the server's clock when it is
--     drawn (a script takes more than a microsecond), so the clock restart
--     is above every fence drawn before, as long as the server's clock never
--     steps back (GUARANTEES.md). The counter then lives ttl_ms more.
--     Raises REDLEASE_FOREIGN when the counter is not a positive integer.
local function next_fence(counter, ttl)
  local f = redis.pcall('INCR', counter)
  if type(f) == 'table' or f < 1 then
    -- A string, not an error table: Redis 6.2 cannot report a table
    -- raised by error() (its handler fails on it, and the code is lost).
    error('REDLEASE_FOREIGN fencing counter is not a positive integer')
  end
  if f == 1 then
    -- INCR created it: no counter was alive.
    local t = redis.call('TIME')
    f = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', counter, string.format('%d', f), 'PX', ttl)
  else
    redis.call('PEXPIRE', counter, ttl)
  end
  return f
end

-- "<token>#<fence>", with the fence written in full (Lua would print a
-- large number in exponent notation).
local function holder_value(token, fence)
  return token .. '#' .. string.format('%d', fence)
end
