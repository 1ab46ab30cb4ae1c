-- Remove every permit of a semaphore, whoever holds it, and wake waiters.
-- Uses     publish.lua
-- KEYS[1]  permits (sorted set: member "<k>:<token>", score = expiry ms)
-- KEYS[2]  permit count (removed with the set)
-- ARGV[1]  wake-up channel
-- ARGV[2]  wake-up message
-- Returns  how many holders (members) with an unexpired lease were removed
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = 0
if redis.call('TYPE', KEYS[1]).ok == 'zset' then
  live = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
end
local removed = redis.call('DEL', KEYS[1], KEYS[2])
if removed > 0 then
  publish(ARGV[1], ARGV[2])
end
return live
