-- Return permits to a semaphore; only their holder's member can.
-- Uses     publish.lua
-- KEYS[1]  permits (sorted set)
-- KEYS[2]  permit count (deleted with the set when the last permit goes)
-- KEYS[3]  waiters' deadlines (sorted set, see sem_acquire.lua): the
--          release is published only while one of them is live
-- ARGV[1]  member "<k>:<token>"
-- ARGV[2]  wake-up channel
-- ARGV[3]  wake-up message
-- Returns  1 released, 0 the permits had expired or been removed (lost)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2])
end
-- Nobody waits (no live waiter entry): no message, for nobody to hear.
if expiry and redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf') > 0 then
  publish(ARGV[2], ARGV[3])
end
if expiry and tonumber(expiry) > now then
  return 1
end
return 0
