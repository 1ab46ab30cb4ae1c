-- Prelude (prepended to the scripts that name it in their "Uses" line; needs
-- fence.lua before it): the waiter queue of an exclusive name, and the
-- direct grant that hands the name to the queue's oldest live waiter.
-- KEYS     none of its own (callers pass the keys)
-- ARGV     none of its own
-- Returns  nothing; defines
--   now_ms() -> the server's clock in milliseconds
--   queue_join(q, qt, token, ttl_ms): puts token in the queue once, in
--     order of arrival (q: sorted set, score = server microseconds), and
--     gives it ttl_ms more to live (qt: sorted set, score = deadline in
--     server ms). A waiter renews this at every attempt; one that stops
--     (crashed, cut off) lapses and is skipped.
--   queue_leave(q, qt, token)
--   queue_head(q, qt) -> the oldest live waiter's token, or nil; drops the
--     lapsed ones on the way
--   grant(lock, counter, q, qt, prefix, token, claim_ms) -> pushed
--     Makes token the holder for claim_ms, takes it off the queue and
--     pushes a wake-up onto the list prefix..token, on which that waiter
--     blocks (BLPOP) with its own acquire script pipelined behind: that
--     script runs as soon as the pop does, and sets the waiter's lease. A
--     waiter that is gone never runs it: the grant lapses after claim_ms
--     and the next waiter takes the name at its next attempt. Returns
--     false when the push was refused (an ACL without RPUSH): the waiter
--     then needs a message.
--   announce(channel, message, mode, pushed): publishes a release message
--     unless mode is 'direct' and the grant (if any) was pushed: a release
--     nobody waits for, or whose waiter was granted directly, sends none.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function queue_join(q, qt, token, ttl)
  if not redis.call('ZSCORE', q, token) then
    local t = redis.call('TIME')
    redis.call('ZADD', q, string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2])), token)
  end
  redis.call('ZADD', qt, now_ms() + ttl, token)
  redis.call('PEXPIRE', q, ttl * 2)
  redis.call('PEXPIRE', qt, ttl * 2)
end

local function queue_leave(q, qt, token)
  redis.call('ZREM', q, token)
  redis.call('ZREM', qt, token)
end

local function queue_head(q, qt)
  if redis.call('EXISTS', q) == 0 then
    return nil
  end
  local now = now_ms()
  -- Each pass removes one lapsed waiter: the loop ends.
  while true do
    local head = redis.call('ZRANGE', q, 0, 0)[1]
    if not head then
      return nil
    end
    local deadline = redis.call('ZSCORE', qt, head)
    if deadline and tonumber(deadline) > now then
      return head
    end
    queue_leave(q, qt, head)
  end
end

local function grant(lock, counter, q, qt, prefix, token, claim)
  local fence = next_fence(counter, claim)
  redis.call('SET', lock, holder_value(token, fence), 'PX', claim)
  queue_leave(q, qt, token)
  local list = prefix .. token
  redis.call('DEL', list)
  local pushed = redis.pcall('RPUSH', list, '1')
  if type(pushed) == 'table' then
    return false
  end
  redis.call('PEXPIRE', list, claim)
  return true
end

local function announce(channel, message, mode, pushed)
  if channel ~= '' and not (mode == 'direct' and pushed) then
    redis.call('PUBLISH', channel, message)
  end
end
