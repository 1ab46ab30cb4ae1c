-- A waiter's look at a count-down latch: its value, and the waiter
-- registered while the latch is closed, so that its opening is published
-- only when somebody waits (latch_count_down.lua).
-- Uses     clock.lua
-- KEYS[1]  the latch: "<count>:<round>"
-- KEYS[2]  its waiters (sorted set: waiter token -> deadline, server ms)
-- ARGV[1]  waiter token
-- ARGV[2]  entry lifetime without another look, in milliseconds
-- Returns  the latch's value, or nil when it has no count
local v = redis.call('GET', KEYS[1])
if v then
  local now = now_ms()
  local ttl = tonumber(ARGV[2])
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  if redis.call('PTTL', KEYS[2]) < ttl * 2 then
    redis.call('PEXPIRE', KEYS[2], ttl * 2)
  end
end
return v
