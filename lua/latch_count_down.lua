-- Count a latch down by one; the last count-down removes it and announces
-- the opening of its round. A latch without a count is left alone
-- (counting down a finished or never-set latch does nothing).
-- Uses     clock.lua, publish.lua
-- KEYS[1]  the latch: "<count>:<round>"
-- KEYS[2]  its waiters (latch_look.lua): the opening is published only
--          while one of them is live, and removes them
-- ARGV[1]  wake-up channel
-- ARGV[2]  wake-up message for the latch key; "#<round>" is appended, so
--          the message names this round's opening and nothing else
-- Returns  {count left, round}: {0, round} = this call opened the latch,
--          {0, ""} = it had no count
local v = redis.call('GET', KEYS[1])
if not v then
  return {0, ''}
end
local n, round = string.match(v, '^(%d+):(.+)$')
n = tonumber(n)
if not n then
  return redis.error_reply('REDLEASE_FOREIGN the latch key holds a value redlease did not write')
end
if n <= 1 then
  local now = now_ms()
  local waiting = redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf') > 0
  redis.call('DEL', KEYS[1], KEYS[2])
  if waiting then
    publish(ARGV[1], ARGV[2] .. '#' .. round)
  end
  return {0, round}
end
redis.call('SET', KEYS[1], (n - 1) .. ':' .. round)
return {n - 1, round}
