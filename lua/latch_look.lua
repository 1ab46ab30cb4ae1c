-- A waiter's look at a count-down latch: its value, and the waiter
-- registered while the latch is closed, so that its opening is announced
-- only when somebody waits (latch_count_down.lua).
-- Uses     clock.lua
-- KEYS[1]  the latch: "<count>:<round>"
-- KEYS[2]  the waiters to register in (sorted set: waiter token ->
--          deadline, server ms): "<latch>:w" for a waiter that waits for
--          the opening's message, "<latch>:b" for one about to block on
--          the round's opening list
-- KEYS[3]  (a waiter about to block) the opening list of the round it
--          waits for: "<latch>#<round>:open" (latch_count_down.lua), which
--          it pops right behind this look. When that round is already over
--          (the latch has no count, or another round's), the look makes
--          sure an element is there for that pop, so that it returns at
--          once rather than block for an opening it missed.
-- ARGV[1]  waiter token
-- ARGV[2]  entry lifetime without another look, in milliseconds
-- ARGV[3]  (with KEYS[3]) the round waited for
-- ARGV[4]  (with KEYS[3]) how long a pushed element lives, in milliseconds
-- Returns  the latch's value, or nil when it has no count
local v = redis.call('GET', KEYS[1])
if KEYS[3] and (not v or string.match(v, '^%d+:(.+)$') ~= ARGV[3]) then
  -- (An ACL that refuses RPUSH refuses the pop too, in the README's line
  -- and every older one: the pop then returns at once.)
  if redis.call('EXISTS', KEYS[3]) == 1
      or type(redis.pcall('RPUSH', KEYS[3], 'open')) == 'number' then
    redis.call('PEXPIRE', KEYS[3], ARGV[4])
  end
  return v
end
if v then
  local now = now_ms()
  local ttl = tonumber(ARGV[2])
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  if redis.call('PTTL', KEYS[2]) < ttl * 2 then
    redis.call('PEXPIRE', KEYS[2], ttl * 2)
  end
end
return v
