-- Take k permits of an expiring semaphore (optionally in FIFO order).
-- KEYS[1]  permits: sorted set, member = "<k>:<token>", score = the permit's
--          expiry in server time (ms); expired permits are reclaimed here
-- KEYS[2]  permit count N while any permit is held (lives as long as KEYS[1])
-- KEYS[3]  fair mode: queue (sorted set, member -> arrival order)
-- KEYS[4]  waiters' deadlines (sorted set, member -> server ms): in fair
--          mode the queue's; in either mode what tells a release that
--          someone waits (sem_release.lua publishes only then)
-- ARGV[1]  member "<k>:<token>"
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  N, the caller's idea of the permit count
-- ARGV[4]  k, permits wanted (1 <= k <= N)
-- ARGV[5]  '1' for FIFO order, '0' otherwise
-- ARGV[6]  waiter entry lifetime without a retry, ms; 0 = do not queue
--          (a try never does)
-- ARGV[7]  'block': this waiter blocks on its grant list (sem_grant.lua);
--          otherwise it waits for release messages, which its entry's
--          deadline says by half a millisecond
-- ARGV[8]  grant list prefix (sem_grant.lua)
-- Returns  {1, 0} acquired (again when the same member asks again: a retry
--          after a lost reply re-grants, it never takes a second permit;
--          so does a waiter whose permits a release granted it);
--          {0, ms} wait (ms until the first permit expires,
--          -1 unknown)
-- Errors   REDLEASE_MISMATCH when holders use another permit count;
--          WRONGTYPE / REDLEASE_FOREIGN when the keys hold foreign data
--          (another type, a permit that never expires).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = tonumber(ARGV[3])
local k = tonumber(ARGV[4])
local stored = redis.call('GET', KEYS[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
-- redlease scores every permit with a finite expiry; one that never
-- expires would hold its permits forever.
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] and tonumber(top[2]) == math.huge then
  return redis.error_reply('REDLEASE_FOREIGN a permit never expires (score +inf; redlease always sets one)')
end
local fair = ARGV[5] == '1'
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  local ttl = tonumber(last[2]) - now
  redis.call('PEXPIRE', KEYS[1], ttl)
  if stored then
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
  redis.call('ZREM', KEYS[4], ARGV[1])
  if fair then
    redis.call('ZREM', KEYS[3], ARGV[1])
  end
  -- A grant made while we were not blocked leaves its wake-up behind.
  redis.call('DEL', ARGV[8] .. ARGV[1])
  return {1, 0}
end
local used = 0
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  used = used + (tonumber(string.match(m, '^(%d+):')) or 1)
end
if used == 0 then
  stored = nil
end
if stored and tonumber(stored) ~= n then
  return redis.error_reply('REDLEASE_MISMATCH this semaphore has ' .. stored ..
    ' permits, the handle says ' .. ARGV[3])
end
local ahead = false
if fair then
  local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
  for _, w in ipairs(dead) do
    redis.call('ZREM', KEYS[3], w)
    redis.call('ZREM', KEYS[4], w)
  end
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  ahead = head ~= nil and head ~= ARGV[1]
end
if not ahead and used + k <= n then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  local ttl = tonumber(last[2]) - now
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ttl)
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('ZREM', KEYS[4], ARGV[1])
  if fair then
    redis.call('ZREM', KEYS[3], ARGV[1])
  end
  return {1, 0}
end
local qttl = tonumber(ARGV[6])
if qttl > 0 then
  if fair and not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
    local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
    local order = 1
    if last[2] then order = tonumber(last[2]) + 1 end
    redis.call('ZADD', KEYS[3], order, ARGV[1])
  end
  -- A waiter in either mode: releases grant it, or tell it, while its
  -- entry lives.
  local mark = '%d.5'
  if ARGV[7] == 'block' then
    mark = '%d'
  end
  redis.call('ZADD', KEYS[4], string.format(mark, now + qttl), ARGV[1])
  if redis.call('PTTL', KEYS[4]) < qttl * 2 then
    redis.call('PEXPIRE', KEYS[4], qttl * 2)
  end
  if fair and redis.call('PTTL', KEYS[3]) < qttl * 2 then
    redis.call('PEXPIRE', KEYS[3], qttl * 2)
  end
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] then
  return {0, tonumber(first[2]) - now}
end
return {0, -1}
