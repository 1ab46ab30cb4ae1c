-- Read-only: permits in use by holders whose lease has not ended, and the
-- stored permit count.
-- Uses     clock.lua
-- KEYS[1]  permits (sorted set)
-- KEYS[2]  permit count
-- ARGV     none
-- Returns  {used, stored count or -1}
local now = now_ms()
local used = 0
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')) do
  used = used + (tonumber(string.match(m, '^(%d+):')) or 1)
end
local stored = redis.call('GET', KEYS[2])
if stored then
  return {used, tonumber(stored)}
end
return {used, -1}
