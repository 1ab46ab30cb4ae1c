-- End a write hold if, and only if, the caller still owns it, and hand it
-- to the writer waiting for it if that one blocks (rw_grant.lua);
-- otherwise publish, for waiting readers and writers.
-- Uses     fence.lua, publish.lua, rw_grant.lua
-- KEYS[1]  writer key ("<owner token>#<fence>")
-- KEYS[2]  writer intent (rw_write_acquire.lua)
-- KEYS[3]  fencing counter (fence.lua)
-- KEYS[4]  readers (sorted set): a writer that downgraded still reads
-- KEYS[5]  waiting readers (rw_read_acquire.lua): told while one is live
-- KEYS[6]  fence floor (fence.lua; always the last key)
-- ARGV[1]  writer token
-- ARGV[2]  wake-up channel
-- ARGV[3]  wake-up message
-- ARGV[4]  grant list prefix (rw_grant.lua)
-- ARGV[5]  claim window of a grant, in milliseconds
-- ARGV[6]  'leave': a waiting writer gives up. Its intent (readers that
--          wait for it are told) and an unpopped wake-up go first; a write
--          hold granted to it meanwhile is then released like a holder's.
-- Returns  1 released (handed on, or waiters notified), 0 not held by
--          this token
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function readers_wait()
  return redis.call('ZCOUNT', KEYS[5], '(' .. now, '+inf') > 0
end
if ARGV[6] == 'leave' then
  local intent = redis.call('GET', KEYS[2])
  if intent and string.match(intent, '^[^#]*') == ARGV[1] then
    redis.call('DEL', KEYS[2])
    if readers_wait() then
      publish(ARGV[2], ARGV[3])
    end
  end
  redis.call('DEL', ARGV[4] .. ARGV[1])
end
local v = redis.call('GET', KEYS[1])
if not v or string.match(v, '^[^#]*') ~= ARGV[1] then
  return 0
end
local handed = rw_hand_to_writer(KEYS[1], KEYS[4], KEYS[2], KEYS[3], ARGV[4],
  tonumber(ARGV[5]), ARGV[2], ARGV[3])
local intent = false
if not handed then
  -- The counter goes with the hold: a fresh one starts above it
  -- (fence.lua), and a name nobody holds leaves no key.
  redis.call('DEL', KEYS[1], KEYS[3])
  intent = redis.call('EXISTS', KEYS[2]) == 1
end
-- Waiting readers are told either way: a writer handed the lock that
-- died never releases it, and they must learn when its claim lapses (the
-- message makes them look, and see how long it has left). A writer still
-- waiting here waits for messages (one that blocks was handed it).
if intent or readers_wait() then
  publish(ARGV[2], ARGV[3])
end
return 1
