-- Raise a fencing counter to at least a value (Redlock: masters count
-- independently; after a grant the granting masters agree on the fence).
-- Uses     clock.lua, fence.lua
-- KEYS[1]  fencing counter (fence.lua)
-- KEYS[2]  fence floor (fence.lua): raised too, or a lapsed counter could
--          restart below this fence after the server's clock stepped back
-- ARGV[1]  the fence just handed out
-- ARGV[2]  how long the counter lives, in milliseconds (the lease: like
--          every counter, it lapses once the name is idle)
-- Returns  the counter's value afterwards (0 if it holds foreign data)
local fence = tonumber(ARGV[1])
if not fence or fence >= FENCE_LIMIT then
  return 0 -- not a fence this server can hold exactly: no vote
end
local cur = redis.call('GET', KEYS[1])
if cur and not tonumber(cur) then
  return 0
end
raise_floor(fence)
if not cur or tonumber(cur) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return tonumber(ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return tonumber(cur)
