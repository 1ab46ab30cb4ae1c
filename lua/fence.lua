-- Prelude (prepended to the scripts that name it in their "Uses" line; needs
-- clock.lua before it):
-- fencing tokens from a counter that does not outlive the name's activity,
-- kept above a floor that does.
-- KEYS     its own: the LAST key of every script that uses it is the fence
--          floor: one string per server (per slot on Cluster) at or
--          above every fence ever drawn there (at most FENCE_RESERVE above
--          the largest); it has no expiry and is never deleted, so at most
--          one key per server (16384 on Cluster)
-- ARGV     none of its own
-- Returns  nothing; defines
--   next_fence(counter, ttl_ms) -> fence, its text
--     The counter plus one while it exists; once it has lapsed (nobody held
--     or waited for the name for a while), the server's clock in
--     microseconds, or one more than the floor if the clock is behind it
--     (a clock stepped back). A fence drawn above the floor raises it a
--     reserve ahead (FENCE_RESERVE), so the floor is written once in that
--     many draws of a busy name rather than at every draw, and every fence
--     ever drawn on this server stays at or below it: fences on a name only
--     ever grow, whatever the server's clock does. The counter then lives
--     ttl_ms more. The text is the fence written in full (as
--     holder_value writes it): the holder's value and the open list take
--     it as it was formatted for the counter, not formatted again.
--     Raises REDLEASE_FOREIGN, before writing anything, when the counter
--     or the floor is not a positive integer below 2^53.
--   next_fences(counters, ttls_ms) -> {fence, ...}
--     next_fence for several counters at once (a multi-lock's names on
--     one server): the floor read once and raised once, for the largest;
--     nothing written unless every counter is sound.
--   raise_floor(fence): the floor is at least fence afterwards.
local fence_floor = KEYS[#KEYS]

-- Fences are integers Lua's numbers hold exactly: below 2^53 (the clock
-- reaches it in the year 2255).
local FENCE_LIMIT = 9007199254740992

-- How far above a fence it draws the floor is raised: the next draws of a
-- live counter up to there write the floor no more (a write the handoff's
-- release made at every grant; now one draw in 16). A counter created
-- while the floor is ahead of the clock starts above the reserve, so each
-- creation may move fences 16 ahead; the clock (a million a second) still
-- outruns that below 62,500 counters created a second on one server, and
-- catches up once they slow down.
local FENCE_RESERVE = 15

-- The floor's value when a fence `f` above it was drawn: `f` and the
-- reserve, below FENCE_LIMIT.
local function reserved(f)
  return string.format('%d', math.min(f + FENCE_RESERVE, FENCE_LIMIT - 1))
end

-- `v` (a string read from a key) as a fence: a positive integer below
-- FENCE_LIMIT; raises REDLEASE_FOREIGN naming `what` otherwise.
local function as_fence(v, what)
  local n = tonumber(v)
  if not n or n < 1 or n ~= math.floor(n) or n >= FENCE_LIMIT then
    error('REDLEASE_FOREIGN ' .. what .. ' is not a positive integer below 2^53')
  end
  return n
end

-- The floor's value (0 if unset).
local function floor_value()
  local low = redis.call('GET', fence_floor)
  if not low then
    return 0
  end
  return as_fence(low, 'fence floor')
end

local function raise_floor(f)
  if floor_value() < f then
    redis.call('SET', fence_floor, reserved(f))
  end
end

-- The fence drawn from a counter whose value is `cur` (nil: lapsed), above
-- the floor `low`, and the server's clock in microseconds if it was read
-- (`now`: read already, or nil; a lapsed counter reads it once per run).
local function drawn(cur, low, now)
  local f
  if cur then
    f = as_fence(cur, 'fencing counter') + 1
  else
    -- No counter alive: start from the clock, but above every fence this
    -- server (slot) has drawn.
    now = now or now_us()
    f = now
    if f <= low then
      f = low + 1
    end
  end
  if f >= FENCE_LIMIT then
    error('REDLEASE_FOREIGN fence would reach 2^53')
  end
  return f, now
end

-- Everything is read and checked before anything is written: a foreign
-- floor or counter leaves every key as it was (an INCR first left a small
-- counter behind, from which fences went backwards once the floor was
-- repaired). Writes are plain: a refusal (READONLY on a replica, OOM) comes
-- back as the server gave it.
local function next_fences(counters, ttls)
  local low = floor_value()
  local fences, top, now = {}, low, nil
  for i, counter in ipairs(counters) do
    local f
    f, now = drawn(redis.call('GET', counter), low, now)
    fences[i] = f
    if f > top then
      top = f
    end
  end
  for i, counter in ipairs(counters) do
    redis.call('SET', counter, string.format('%d', fences[i]), 'PX', ttls[i])
  end
  if top > low then
    redis.call('SET', fence_floor, reserved(top))
  end
  return fences
end

-- next_fences for one counter, without its tables: it runs on every
-- acquisition and every handoff, before the new holder's reply.
local function next_fence(counter, ttl)
  local low = floor_value()
  local f = drawn(redis.call('GET', counter), low)
  local text = string.format('%d', f)
  redis.call('SET', counter, text, 'PX', ttl)
  if f > low then
    redis.call('SET', fence_floor, reserved(f))
  end
  return f, text
end

-- "<token>#<fence>", with the fence written in full (Lua would print a
-- large number in exponent notation).
local function holder_value(token, fence)
  return token .. '#' .. string.format('%d', fence)
end
