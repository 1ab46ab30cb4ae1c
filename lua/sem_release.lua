-- Return permits to a semaphore (only their holder's member can), and hand
-- what is free on to its waiters (sem_grant.lua).
-- Uses     publish.lua, sem_grant.lua
-- KEYS[1]  permits (sorted set)
-- KEYS[2]  permit count (deleted with the set when the last permit goes)
-- KEYS[3]  fair mode's queue (sorted set, see sem_acquire.lua)
-- KEYS[4]  waiters' deadlines (sorted set, see sem_acquire.lua)
-- ARGV[1]  member "<k>:<token>"
-- ARGV[2]  wake-up channel
-- ARGV[3]  wake-up message
-- ARGV[4]  grant list prefix (sem_grant.lua)
-- ARGV[5]  claim window of a grant, in milliseconds
-- ARGV[6]  the caller's permit count, used when no count is stored
-- ARGV[7]  '1' fair mode, '0' otherwise
-- ARGV[8]  'leave': a waiter gives up. Its entry and an unpopped wake-up
--          go too, and permits granted to it just as it gave up are
--          returned like a release.
-- Returns  1 released, 0 the permits had expired or been removed (lost,
--          or, leaving, never granted)
local keys = {KEYS[1], KEYS[2], KEYS[3], KEYS[4]}
local fair = ARGV[7] == '1'
if ARGV[8] == 'leave' then
  redis.call('ZREM', KEYS[4], ARGV[1])
  if fair then
    redis.call('ZREM', KEYS[3], ARGV[1])
  end
  redis.call('DEL', ARGV[4] .. ARGV[1])
end
local now = sem_now()
local n = tonumber(redis.call('GET', KEYS[2])) or tonumber(ARGV[6])
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2])
end
-- A waiter that left may have been the head a fair queue waited behind.
if expiry or (fair and ARGV[8] == 'leave') then
  sem_hand_on(keys, n, fair, ARGV[4], tonumber(ARGV[5]), now, ARGV[2], ARGV[3])
end
if expiry and tonumber(expiry) > now then
  return 1
end
return 0
