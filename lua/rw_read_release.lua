-- Release one reader's hold; other readers are untouched. The last reader
-- out hands the write lock to a waiting writer that blocks (rw_grant.lua).
-- Uses     fence.lua, publish.lua, rw_grant.lua
-- KEYS[1]  readers (sorted set)
-- KEYS[2]  writer intent (a writer waiting for the readers to leave):
--          nothing is published unless one waits (readers never wait for
--          readers)
-- KEYS[3]  writer key, KEYS[4] fencing counter (rw_write_acquire.lua)
-- KEYS[5]  waiting readers (rw_read_acquire.lua)
-- KEYS[6]  fence floor (fence.lua; always the last key)
-- ARGV[1]  reader token
-- ARGV[2]  wake-up channel
-- ARGV[3]  wake-up message
-- ARGV[4]  grant list prefix (rw_grant.lua)
-- ARGV[5]  claim window of a grant, in milliseconds
-- ARGV[6]  'leave': a waiting reader gives up (its waiting entry goes)
-- Returns  1 released, 0 this reader held nothing (expired or removed)
if ARGV[6] == 'leave' then
  redis.call('ZREM', KEYS[5], ARGV[1])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
if expiry and tonumber(expiry) > now then
  local intent = redis.call('GET', KEYS[2])
  if intent then
    -- A blocking writer needs the last reader only (rw_hand_to_writer
    -- counts those left); one that waits for messages is told at every
    -- release, as before.
    local free = redis.call('EXISTS', KEYS[3]) == 0
    if not (free and rw_hand_to_writer(KEYS[3], KEYS[1], KEYS[2], KEYS[4], ARGV[4],
        tonumber(ARGV[5]), ARGV[2], ARGV[3]))
        and not string.match(intent, '#b$') then
      publish(ARGV[2], ARGV[3])
    end
  end
  return 1
end
return 0
