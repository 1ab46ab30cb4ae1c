-- Remove every permit of a semaphore, whoever holds it, and hand the
-- permits on to its waiters (sem_grant.lua).
-- Uses     clock.lua, publish.lua, sem_grant.lua
-- KEYS[1]  permits (sorted set: member "<k>:<token>", score = expiry ms)
-- KEYS[2]  permit count (removed with the set)
-- KEYS[3]  fair mode's queue, KEYS[4] waiters' deadlines (sem_acquire.lua)
-- ARGV[1]  wake-up channel
-- ARGV[2]  wake-up message
-- ARGV[3]  grant prefix, ARGV[4] claim window in ms (sem_grant.lua)
-- ARGV[5]  the caller's permit count, used when no count is stored
-- ARGV[6]  '1' fair mode, '0' otherwise
-- Returns  how many holders (members) with an unexpired lease were removed
local now = now_ms()
local live = 0
if redis.call('TYPE', KEYS[1]).ok == 'zset' then
  live = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
end
local n = tonumber(redis.call('GET', KEYS[2])) or tonumber(ARGV[5])
local removed = redis.call('DEL', KEYS[1], KEYS[2])
if removed > 0 then
  sem_offer({KEYS[1], KEYS[2], KEYS[3], KEYS[4]}, n, ARGV[6] == '1', ARGV[3],
    tonumber(ARGV[4]), now, ARGV[1], ARGV[2], true)
end
return live
