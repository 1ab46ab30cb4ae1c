-- Wait on a latch's round: says whether the round is over, and if not,
-- joins the round's blocking waiters (when the caller blocks), so that
-- the last count-down pushes it a wake-up.
-- KEYS[1]  the latch: "<count>:<round>"
-- KEYS[2]  the round's blocking waiters (sorted set: token -> deadline in
--          server ms); each blocks (BLPOP) on the round's wake-up list
-- ARGV[1]  the round waited on
-- ARGV[2]  the waiter's token
-- ARGV[3]  how long the entry lives (ms; 0: the waiter does not block and
--          waits for the opening message instead)
-- Returns  {1, 0} the round is over (the latch opened), {0, -1} it is not
local v = redis.call('GET', KEYS[1])
if not v or string.match(v, '^%d+:(.+)$') ~= ARGV[1] then
  return {1, 0}
end
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[2])
  -- Only ever lengthen: the set lives while any of its waiters does.
  if redis.call('PTTL', KEYS[2]) < ttl * 2 then
    redis.call('PEXPIRE', KEYS[2], ttl * 2)
  end
end
return {0, -1}
