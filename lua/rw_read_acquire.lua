-- Take a read hold of a read-write lock.
-- KEYS[1]  writer key: a string "<writer token>#<fence>" while write-held
-- KEYS[2]  readers: sorted set, member = reader token, score = the reader's
--          expiry in server time (ms); each reader expires on its own
-- KEYS[3]  writer intent: a waiting writer's token (short PX; see
--          rw_write_acquire.lua); while it exists new readers wait, so a
--          stream of readers cannot starve it
-- ARGV[1]  reader token
-- ARGV[2]  lease in milliseconds
-- KEYS[4]  waiting readers (sorted set: reader token -> deadline, server
--          ms): a writer's release or hand-over publishes only while one
--          of them is live
-- ARGV[3]  the caller's own write token if this thread holds the write lock
--          (a downgrade), else ''
-- ARGV[4]  waiting entry lifetime without a retry, ms; 0 = do not register
--          (a try never does)
-- Returns  {1, 0} acquired (again when the same token asks again: a retry
--          after a lost reply re-grants, it never adds a second hold);
--          {0, ms} wait (ms = what blocks us, -1 unknown)
-- Errors   WRONGTYPE / REDLEASE_FOREIGN when the keys hold foreign data.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local writer = redis.call('GET', KEYS[1])
if writer and string.sub(writer, 1, 3) ~= 'rl:' then
  return redis.error_reply('REDLEASE_FOREIGN writer key holds a value not written by redlease')
end
-- redlease always writes a lease and an intent lifetime: a writer or an
-- intent that never expires would make every waiter wait forever.
if writer and redis.call('PTTL', KEYS[1]) == -1 then
  return redis.error_reply('REDLEASE_FOREIGN writer key has no expiry (redlease always sets one)')
end
if redis.call('EXISTS', KEYS[3]) == 1 and redis.call('PTTL', KEYS[3]) == -1 then
  return redis.error_reply('REDLEASE_FOREIGN writer intent has no expiry (redlease always sets one)')
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local top = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if top[2] and tonumber(top[2]) == math.huge then
  return redis.error_reply('REDLEASE_FOREIGN a reader never expires (score +inf; redlease always sets one)')
end
local expiry = now + tonumber(ARGV[2])
-- Wait for `ms` (what blocks us), registered as a waiting reader.
local function wait(ms)
  local ttl = tonumber(ARGV[4])
  if ttl > 0 then
    redis.call('ZADD', KEYS[4], now + ttl, ARGV[1])
    if redis.call('PTTL', KEYS[4]) < ttl * 2 then
      redis.call('PEXPIRE', KEYS[4], ttl * 2)
    end
  end
  return {0, ms}
end
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  redis.call('ZADD', KEYS[2], expiry, ARGV[1])
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[2], tonumber(last[2]) - now)
  return {1, 0}
end
if writer and string.match(writer, '^[^#]*') ~= ARGV[3] then
  return wait(redis.call('PTTL', KEYS[1]))
end
if ARGV[3] == '' then
  local intent = redis.call('GET', KEYS[3])
  if intent then
    return wait(redis.call('PTTL', KEYS[3]))
  end
end
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZADD', KEYS[2], expiry, ARGV[1])
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[2], tonumber(last[2]) - now)
return {1, 0}
