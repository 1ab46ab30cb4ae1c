-- A blocked waiter's look at its lock, made by the process's renewal
-- thread on another connection while the waiter stays blocked (so it keeps
-- its place among the blocked): when the holder's lease runs out with
-- nobody releasing (the holder died, or was cut off), nobody else opens
-- the name to the waiters, so this does.
-- Uses     fence.lua, publish.lua, queue.lua
-- KEYS[1]  lock key, KEYS[2] fencing counter, KEYS[3] waiter queue,
--          KEYS[4] its deadlines (as lua/lock_acquire.lua)
-- ARGV[1]  the waiter's token
-- ARGV[2]  its queue entry lifetime in milliseconds
-- ARGV[3]  grant prefix (queue.lua)
-- ARGV[4]  claim window of a hand-over, in milliseconds
-- ARGV[5]  wake-up channel, ARGV[6] wake-up message, ARGV[7] 'queued' or
--          '' (queue.lua announce)
-- Returns  milliseconds until the next look is useful: the holder's
--          remaining lease, or the claim window of a hand-over made here;
--          0 when this waiter holds the lock (no more looks). Never errors
--          on a value redlease wrote: it runs in pipelined renewal batches.
local lock, counter, q, qt = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local me, ttl, prefix, claim = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
if redis.call('TYPE', lock).ok ~= 'none' then
  local holder = redis.call('GET', lock)
  if type(holder) ~= 'string' or string.match(holder, '^[^#]*') == me then
    return 0
  end
  local pttl = redis.call('PTTL', lock)
  if pttl < 0 then
    return 30000 -- no expiry: not written by redlease (lock_acquire says so)
  end
  -- 0 means under a millisecond left, not "ours": look again at once.
  return math.max(pttl, 1)
end
local open = prefix .. 'open'
if redis.call('EXISTS', open) == 1 then
  -- As in lock_acquire.lua: a hand-over nobody blocked took.
  redis.call('DEL', open, q, qt, prefix .. 'told')
end
-- Still waiting (the queue may have lapsed, been purged or flushed).
queue_join(q, qt, prefix, me, ttl, true)
local told = hand_on(lock, counter, q, qt, prefix, claim)
announce(ARGV[5], ARGV[6], ARGV[7], told)
return claim
