-- Release one reader's hold; other readers are untouched. The last reader
-- out opens the write hold to the queued writers (rw_grant.lua rw_open).
-- Uses     clock.lua, fence.lua, publish.lua, queue.lua, rw_grant.lua
-- KEYS     as every read-write lock script (src/rwlock.rs Keys::scripted):
--          KEYS[1] writer key ("<owner token>#<fence>", or "rl:grant#<fence>"
--          while open to the queued writers), KEYS[2] readers (sorted
--          set: reader token -> expiry, server ms), KEYS[3] fencing counter
--          (fence.lua), KEYS[4] writer queue and KEYS[5] its deadlines
--          (queue.lua), KEYS[6] waiting readers (rw_read_acquire.lua),
--          KEYS[7] fence floor (fence.lua; always the last key)
-- ARGV[1]  reader token
-- ARGV[2]  wake-up channel
-- ARGV[3]  wake-up message
-- ARGV[4]  grant prefix (queue.lua, rw_grant.lua)
-- ARGV[5]  claim window of a hand-over, in milliseconds
-- ARGV[6]  'leave': a waiting reader gives up (its waiting entry goes)
-- Returns  1 released, 2 released and the write hold opened to the
--          writers (the caller looks at the name again after the claim:
--          lua/rw_watch.lua), 0 this reader held nothing (expired or
--          removed)
if ARGV[6] == 'leave' then
  redis.call('ZREM', KEYS[6], ARGV[1])
end
local expiry = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not expiry then
  return 0
end
local now = now_ms()
redis.call('ZREM', KEYS[2], ARGV[1])
if tonumber(expiry) <= now then
  return 0
end
-- Nothing more unless a writer waits: every call here is on the path of
-- the writer's hand-over. With none, the run ends before the writers'
-- definitions are made (src/protocol/scripts compose).
if redis.call('EXISTS', KEYS[4]) == 0 then
  return 1
end
-- (the rest of the preludes)
if redis.call('EXISTS', KEYS[1]) == 0
    and rw_open(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[4], tonumber(ARGV[5]),
      ARGV[2], ARGV[3], now) then
  return 2
end
return 1
