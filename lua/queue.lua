-- Prelude (prepended to the scripts that name it in their "Uses" line; needs
-- fence.lua and publish.lua before it): the waiter queue of an exclusive
-- name, and the direct grant that hands the name to the queue's oldest live
-- waiter.
-- KEYS     none of its own (callers pass the keys)
-- ARGV     none of its own
-- Returns  nothing; defines
--   now_ms() -> the server's clock in milliseconds
--   queue_join(q, qt, token, ttl_ms, blocks): puts token in the queue
--     once, in order of arrival (q: sorted set, score = server
--     microseconds), and gives it ttl_ms more to live (qt: sorted set,
--     score = deadline in server ms). A waiter renews this at every
--     attempt; one that stops (crashed, cut off) lapses and is skipped.
--     blocks: the waiter blocks on its grant list and needs no message
--     when granted; a waiter that waits for messages is marked by half a
--     millisecond on its deadline.
--   queue_leave(q, qt, token)
--   queue_head(q, qt) -> the oldest live waiter's token (or nil) and
--     whether it blocks; drops the lapsed ones on the way
--   grant(lock, counter, q, qt, prefix, token, blocks, claim_ms) -> told
--     Makes token the holder for claim_ms, takes it off the queue and
--     pushes a wake-up onto the list prefix..token, on which a blocking
--     waiter waits (BLPOP) with its own acquire script pipelined behind:
--     that script runs as soon as the pop does, and sets the waiter's
--     lease. A waiter that is gone never runs it: the grant lapses after
--     claim_ms and the next waiter takes the name at its next attempt.
--     Returns whether the waiter learns of it without a message (it
--     blocks, and the push was not refused by an ACL without RPUSH).
--   announce(channel, message, mode, told): publishes a release message
--     unless mode is 'queued' (every waiter of the name is in the queue)
--     and nobody needs one (told: the grant, if any, reached its waiter
--     directly; a release nobody is queued for sends none).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function queue_join(q, qt, token, ttl, blocks)
  if not redis.call('ZSCORE', q, token) then
    local t = redis.call('TIME')
    redis.call('ZADD', q, string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2])), token)
  end
  redis.call('ZADD', qt, string.format(blocks and '%d' or '%d.5', now_ms() + ttl), token)
  -- Only ever lengthen: waiters renew at different paces (a blocking one
  -- every slice, one that waits for messages far less often), and a
  -- quick one must not cut the queue's life short under a slow one.
  if redis.call('PTTL', q) < ttl * 2 then
    redis.call('PEXPIRE', q, ttl * 2)
    redis.call('PEXPIRE', qt, ttl * 2)
  end
end

local function queue_leave(q, qt, token)
  redis.call('ZREM', q, token)
  redis.call('ZREM', qt, token)
end

local function queue_head(q, qt)
  local now = nil
  -- Each pass removes one lapsed waiter: the loop ends.
  while true do
    local head = redis.call('ZRANGE', q, 0, 0)[1]
    if not head then
      return nil
    end
    -- The clock only once somebody waits (the common release has nobody).
    now = now or now_ms()
    local deadline = redis.call('ZSCORE', qt, head)
    if deadline and tonumber(deadline) > now then
      return head, tonumber(deadline) % 1 == 0
    end
    queue_leave(q, qt, head)
  end
end

local function grant(lock, counter, q, qt, prefix, token, blocks, claim)
  local fence = next_fence(counter, claim)
  redis.call('SET', lock, holder_value(token, fence), 'PX', claim)
  queue_leave(q, qt, token)
  -- A wake-up left on the list by an earlier grant to this token (one
  -- that lapsed, or was force-unlocked, unpopped) is harmless: the
  -- script pipelined behind the pop decides, and finds what is true now.
  local list = prefix .. token
  local pushed = redis.pcall('RPUSH', list, '1')
  if type(pushed) == 'table' then
    return false
  end
  redis.call('PEXPIRE', list, claim)
  return blocks
end

local function announce(channel, message, mode, told)
  if channel ~= '' and not (mode == 'queued' and told) then
    publish(channel, message)
  end
end
