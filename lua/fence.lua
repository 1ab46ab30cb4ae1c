-- Prelude (prepended to the scripts that name it in their "Uses" line):
-- fencing tokens from a counter that does not outlive the name's activity,
-- kept above a floor that does.
-- KEYS     its own: the LAST key of every script that uses it is the fence
--          floor: one string per server (per slot on Cluster) holding the
--          largest fence ever drawn there; it has no expiry and is never
--          deleted, so at most one key per server (16384 on Cluster)
-- ARGV     none of its own
-- Returns  nothing; defines
--   next_fence(counter, ttl_ms) -> fence
--     The counter plus one while it exists; once it has lapsed (nobody held
--     or waited for the name for a while), the server's clock in
--     microseconds, or one more than the floor if the clock is behind it
--     (a clock stepped back). Every fence drawn raises the floor to it, so
--     fences on a name only ever grow, whatever the server's clock does.
--     The counter then lives ttl_ms more.
--     Raises REDLEASE_FOREIGN when the counter or the floor is not a
--     positive integer.
--   raise_floor(fence): the floor is at least fence afterwards.
local fence_floor = KEYS[#KEYS]

-- The floor's value (0 if unset).
local function floor_value()
  local low = redis.call('GET', fence_floor)
  if not low then
    return 0
  end
  low = tonumber(low)
  if not low then
    error('REDLEASE_FOREIGN fence floor is not a number')
  end
  return low
end

local function raise_floor(f)
  if floor_value() < f then
    redis.call('SET', fence_floor, string.format('%d', f))
  end
end

local function next_fence(counter, ttl)
  local f = redis.pcall('INCR', counter)
  if type(f) == 'table' then
    local e = f.err or ''
    -- Only a counter that holds something else is foreign; any other
    -- refusal (READONLY on a replica, OOM) is passed on as it came.
    -- Strings, not error tables: Redis 6.2 cannot report a table raised
    -- by error() (its handler fails on it, and the code is lost).
    if string.find(e, 'WRONGTYPE', 1, true) or string.find(e, 'not an integer', 1, true) then
      error('REDLEASE_FOREIGN fencing counter is not a positive integer')
    end
    error(e)
  end
  if f < 1 then
    error('REDLEASE_FOREIGN fencing counter is not a positive integer')
  end
  local low = floor_value()
  if f == 1 then
    -- INCR created it: no counter was alive. Start from the clock, but
    -- above every fence this server (slot) has drawn.
    local t = redis.call('TIME')
    f = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if f <= low then
      f = low + 1
    end
    redis.call('SET', counter, string.format('%d', f), 'PX', ttl)
  else
    redis.call('PEXPIRE', counter, ttl)
  end
  if f > low then
    redis.call('SET', fence_floor, string.format('%d', f))
  end
  return f
end

-- "<token>#<fence>", with the fence written in full (Lua would print a
-- large number in exponent notation).
local function holder_value(token, fence)
  return token .. '#' .. string.format('%d', fence)
end
