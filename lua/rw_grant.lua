-- Prelude (prepended to the scripts that name it in their "Uses" line; needs
-- fence.lua and publish.lua before it): the direct grant of a read-write
-- lock's write hold to the writer waiting for it, as queue.lua does for a
-- lock.
-- KEYS     none of its own (callers pass the keys)
-- ARGV     none of its own
-- Returns  nothing; defines
--   rw_hand_to_writer(writer, readers, intent, counter, prefix, claim_ms,
--     channel, message) -> whether the write hold was handed on. Call it
--     when the write hold is free or the caller's. Unless a reader still
--     holds (a writer's own read hold, after a downgrade, counts), and if
--     the waiting writer's
--     intent says it blocks ("<token>#b"), makes it the writer for
--     claim_ms with a fresh fence, removes the intent and pushes a wake-up
--     onto the list prefix..token, on which it blocks with its acquire
--     script pipelined behind, which sets its lease. A writer that is
--     gone never runs it: the grant lapses after claim_ms. If the push is
--     refused (an ACL without RPUSH), publishes instead.
local function rw_hand_to_writer(writer, readers, intent, counter, prefix, claim, channel, message)
  local waiting = redis.call('GET', intent)
  local token = waiting and string.match(waiting, '^([^#]*)#b$')
  if not token then
    return false
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if redis.call('ZCOUNT', readers, '(' .. now, '+inf') > 0 then
    return false
  end
  local fence = next_fence(counter, claim)
  redis.call('SET', writer, holder_value(token, fence), 'PX', claim)
  redis.call('DEL', intent)
  local list = prefix .. token
  -- A wake-up left by an earlier grant is harmless (see queue.lua).
  local pushed = redis.pcall('RPUSH', list, '1')
  if type(pushed) == 'table' then
    publish(channel, message)
  else
    redis.call('PEXPIRE', list, claim)
  end
  return true
end
