-- Release one reader's hold; other readers are untouched.
-- Uses     publish.lua
-- KEYS[1]  readers (sorted set)
-- KEYS[2]  writer intent (a writer waiting for the readers to leave): the
--          release is published only while one waits (readers never wait
--          for readers)
-- ARGV[1]  reader token
-- ARGV[2]  wake-up channel
-- ARGV[3]  wake-up message
-- Returns  1 released, 0 this reader held nothing (expired or removed)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
if expiry and tonumber(expiry) > now then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    publish(ARGV[2], ARGV[3])
  end
  return 1
end
return 0
