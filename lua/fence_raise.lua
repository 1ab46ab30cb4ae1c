-- Raise a fencing counter to at least a value (Redlock: masters count
-- independently; after a grant the granting masters agree on the fence).
-- Uses     clock.lua, fence.lua
-- KEYS[1]  fencing counter (fence.lua)
-- KEYS[2]  fence floor (fence.lua): raised too, or a lapsed counter could
--          restart below this fence after the server's clock stepped back
-- ARGV[1]  the fence just handed out
-- ARGV[2]  how long the counter lives, in milliseconds (the lease: like
--          every counter, it lapses once the name is idle)
-- Returns  the largest fence this server knew of for the name before the
--          raise: its counter, or while no counter lives, the floor (every
--          name's: a lapsed counter's fences are somewhere below it); 0 if
--          neither; -1 if either holds foreign data or the fence is not
--          one this server can hold exactly (no vote). The caller owns the
--          fence on this server only if the raise moved it up (the value
--          is below the fence), or its own grant here drew the fence and
--          nothing moved past it since (the value is the fence): a value
--          at or above it otherwise may be another grant's (found by the
--          model checker, check/: "redlock: 3 masters, 2 clients, 2
--          faults").
local fence = tonumber(ARGV[1])
if not fence or fence >= FENCE_LIMIT then
  return -1
end
local cur = redis.call('GET', KEYS[1])
if cur and not tonumber(cur) then
  return -1
end
local ok, low = pcall(floor_value)
if not ok then
  return -1
end
local before = low
if cur then
  before = tonumber(cur)
end
raise_floor(fence)
if not cur or tonumber(cur) < fence then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return before
