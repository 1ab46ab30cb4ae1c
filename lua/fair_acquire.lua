-- Acquire an exclusive lease in FIFO order of arrival (the fair lock).
-- KEYS[1]  lock key: a string "<owner token>#<fence>" while held
-- KEYS[2]  fencing counter
-- KEYS[3]  queue: sorted set, member = waiter token, score = arrival order
-- KEYS[4]  queue deadlines: sorted set, member = waiter token, score = server
--          time (ms) after which the waiter counts as dead and is dropped
-- ARGV[1]  owner token (also the waiter's queue entry)
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  how long a queue entry lives without a retry, in milliseconds
-- Returns  {1, fence}  acquired (again, with the same fence, when the same
--                      token asks again: a retry after a lost reply)
--          {0, ms}     wait; ms = the holder's remaining lease, -1 if unknown
-- Times come from the server's clock (TIME), never a client's.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Drop waiters that stopped retrying (crashed, or gave up without leaving).
local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
for _, w in ipairs(dead) do
  redis.call('ZREM', KEYS[3], w)
  redis.call('ZREM', KEYS[4], w)
end
local holder = redis.call('GET', KEYS[1])
if holder and string.sub(holder, 1, 3) ~= 'rl:' then
  return redis.error_reply('REDLEASE_FOREIGN lock key holds a value not written by redlease')
end
-- As in lock_acquire.lua: a holder that never expires is not ours.
if holder and redis.call('PTTL', KEYS[1]) == -1 then
  return redis.error_reply('REDLEASE_FOREIGN lock key has no expiry (redlease always sets one)')
end
if holder and string.match(holder, '^[^#]*') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(string.match(holder, '#(%d+)$')) or 0}
end
if not holder then
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if head == nil or head == ARGV[1] then
    local fence = redis.pcall('INCR', KEYS[2])
    if type(fence) == 'table' and fence.err or fence < 1 then
      return redis.error_reply('REDLEASE_FOREIGN fencing counter is not a positive integer')
    end
    redis.call('SET', KEYS[1], ARGV[1] .. '#' .. fence, 'PX', ARGV[2])
    redis.call('ZREM', KEYS[3], ARGV[1])
    redis.call('ZREM', KEYS[4], ARGV[1])
    return {1, fence}
  end
end
-- Join the queue (once) and refresh our deadline.
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  local order = 1
  if last[2] then order = tonumber(last[2]) + 1 end
  redis.call('ZADD', KEYS[3], order, ARGV[1])
end
local ttl = tonumber(ARGV[3])
redis.call('ZADD', KEYS[4], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[3], ttl * 2)
redis.call('PEXPIRE', KEYS[4], ttl * 2)
if holder then
  return {0, redis.call('PTTL', KEYS[1])}
end
return {0, -1}
