-- Extend one member's lease in a sorted set of leases (RW readers,
-- semaphore permits): score = expiry in server time (ms).
-- Uses     clock.lua
-- KEYS[1]  the sorted set
-- KEYS[2]  optional companion key that lives exactly as long as the set
--          (the semaphore's permit count)
-- ARGV[1]  member (the holder's token)
-- ARGV[2]  lease in milliseconds, counted from now
-- ARGV[3]  optional: 'exact' sets the expiry to now + ARGV[2] even if that
--          is sooner (an explicit extend); without it (renewal) the expiry
--          never moves earlier, so a renewal sent before an explicit extend
--          but run after it cannot undo the extension
-- Returns  1 extended, 0 the member is gone or already expired (lost),
--          -1 the server refused the write (e.g. OOM): undecided, retry.
--          Never errors: it runs in pipelined renewal batches.
if redis.call('TYPE', KEYS[1]).ok ~= 'zset' then
  return 0
end
local now = now_ms()
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) <= now then
  return 0
end
local score = now + tonumber(ARGV[2])
if ARGV[3] ~= 'exact' and tonumber(expiry) > score then
  score = tonumber(expiry)
end
local ok = redis.pcall('ZADD', KEYS[1], score, ARGV[1])
if type(ok) == 'table' and ok.err then
  return -1
end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], tonumber(last[2]) - now)
if KEYS[2] then
  redis.call('PEXPIRE', KEYS[2], tonumber(last[2]) - now)
end
return 1
