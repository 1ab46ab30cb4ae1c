-- Leave a fair queue (a waiter that gave up), waking the others so the next
-- in line does not wait for the departed entry to expire.
-- Uses     publish.lua
-- KEYS[1]  queue (sorted set of waiter tokens)
-- KEYS[2]  queue deadlines (sorted set)
-- ARGV[1]  waiter token
-- ARGV[2]  wake-up channel
-- ARGV[3]  wake-up message
-- Returns  1 if the waiter was queued, 0 otherwise
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if removed == 1 then
  publish(ARGV[2], ARGV[3])
end
return removed
