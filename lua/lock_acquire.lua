-- Acquire an exclusive lease (plain or fair lock) and draw a fencing token,
-- atomically. A waiter queues; a release hands the lock to the oldest live
-- waiter (queue.lua), so waiting is first come, first served.
-- Uses     fence.lua, publish.lua, queue.lua
-- KEYS[1]  lock key: a string "<owner token>#<fence>" while held
-- KEYS[2]  fencing counter (fence.lua)
-- KEYS[3]  waiter queue (queue.lua)
-- KEYS[4]  waiter deadlines (queue.lua)
-- ARGV[1]  owner token (starts with "rl:", contains no '#'); also the
--          waiter's queue entry
-- ARGV[2]  lease in milliseconds (> 0)
-- ARGV[3]  queue entry lifetime in milliseconds; 0 = do not queue (a
--          try_acquire never does)
-- ARGV[4]  grant list prefix (queue.lua)
-- ARGV[5]  claim window of a grant, in milliseconds (queue.lua)
-- ARGV[6]  wake-up channel, ARGV[7] wake-up message, ARGV[8] 'queued' or
--          '' (queue.lua announce): for a lock handed on from here
-- ARGV[9]  'block': this waiter blocks on its grant list (queue.lua
--          queue_join); otherwise it waits for release messages
-- Returns  {1, fence}  acquired, with the lease set to ARGV[2]: the lock
--                      was free with no live waiter ahead, or it had been
--                      granted to this token (a release handed it over, or
--                      this is a retry after a lost reply: a hold is
--                      counted once and keeps its fence)
--          {0, ms}     wait; ms = the holder's remaining lease
-- Errors   WRONGTYPE (key is not a string), REDLEASE_FOREIGN (a string not
--          written by redlease, a holder without expiry, or a counter that
--          is not a positive integer).
local lock, counter, q, qt = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local me, lease, ttl, blocks = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[9] == 'block'
local holder = redis.call('GET', lock)
if holder then
  if string.match(holder, '^[^#]*') == me then
    redis.call('PEXPIRE', lock, lease)
    -- A grant made while we were not blocked leaves its wake-up behind.
    redis.call('DEL', ARGV[4] .. me)
    return {1, tonumber(string.match(holder, '#(%d+)$')) or 0}
  end
  if string.sub(holder, 1, 3) ~= 'rl:' then
    return redis.error_reply('REDLEASE_FOREIGN lock key holds a value not written by redlease')
  end
  local pttl = redis.call('PTTL', lock)
  if pttl == -1 then
    -- redlease always writes a lease; a holder that never expires would
    -- make every waiter wait forever.
    return redis.error_reply('REDLEASE_FOREIGN lock key has no expiry (redlease always sets one)')
  end
  if ttl > 0 then
    queue_join(q, qt, me, ttl, blocks)
  end
  return {0, pttl}
end
local head, head_blocks = queue_head(q, qt)
if head == nil or head == me then
  local fence = next_fence(counter, lease)
  redis.call('SET', lock, holder_value(me, fence), 'PX', lease)
  if head then
    queue_leave(q, qt, me)
  end
  return {1, fence}
end
-- Free, yet a live waiter is ahead (the holder's lease ran out, or a grant
-- lapsed, with nobody to hand the lock on): hand it on now, then wait.
local told = grant(lock, counter, q, qt, ARGV[4], head, head_blocks, tonumber(ARGV[5]))
announce(ARGV[6], ARGV[7], ARGV[8], told)
if ttl > 0 then
  queue_join(q, qt, me, ttl, blocks)
end
return {0, tonumber(ARGV[5])}
