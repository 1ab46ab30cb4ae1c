-- Count a latch down by one; the last count-down removes it and wakes its
-- waiters. A latch without a count is left alone (counting down a
-- finished or never-set latch does nothing, as in Redisson).
-- KEYS[1]  the latch count
-- ARGV[1]  wake-up channel
-- ARGV[2]  wake-up message
-- Returns  the count left (0 = the latch opened, or had no count)
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local n = tonumber(v)
if not n or n ~= math.floor(n) then
  return redis.error_reply('REDLEASE_FOREIGN the latch key holds ' .. v)
end
if n <= 1 then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[1], ARGV[2])
  return 0
end
return redis.call('DECR', KEYS[1])
