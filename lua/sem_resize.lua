-- Change a semaphore's permit count while permits may be held. Holders keep
-- their permits; new acquisitions see the new count, and handles that still
-- use the old count get a mismatch error. Permits a larger count frees go
-- to waiters (sem_grant.lua sem_offer).
-- Uses     clock.lua, publish.lua, sem_grant.lua
-- KEYS[1]  permits (sorted set)
-- KEYS[2]  permit count
-- KEYS[3]  fair mode's queue, KEYS[4] waiters' deadlines (sem_acquire.lua)
-- ARGV[1]  new count
-- ARGV[2]  wake-up channel
-- ARGV[3]  wake-up message
-- ARGV[4]  grant prefix, ARGV[5] claim window in ms (sem_grant.lua)
-- ARGV[6]  '1' fair mode, '0' otherwise
-- Returns  1
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('SET', KEYS[2], ARGV[1], 'KEEPTTL')
end
sem_offer({KEYS[1], KEYS[2], KEYS[3], KEYS[4]}, tonumber(ARGV[1]), ARGV[6] == '1',
  ARGV[4], tonumber(ARGV[5]), now_ms(), ARGV[2], ARGV[3], true)
return 1
