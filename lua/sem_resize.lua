-- Change a semaphore's permit count while permits may be held. Holders keep
-- their permits; new acquisitions see the new count, and handles that still
-- use the old count get a mismatch error.
-- Uses     publish.lua
-- KEYS[1]  permits (sorted set)
-- KEYS[2]  permit count
-- ARGV[1]  new count
-- ARGV[2]  wake-up channel
-- ARGV[3]  wake-up message
-- Returns  1
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('SET', KEYS[2], ARGV[1], 'KEEPTTL')
end
publish(ARGV[2], ARGV[3])
return 1
