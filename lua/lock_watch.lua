-- A look at a lock, made by the process's renewal thread in its pipeline:
-- for a waiter blocked on the lock (on another connection, so it keeps its
-- place among the blocked), and once after a hand-over or a shortened
-- lease. A lock key that goes without a release (its holder died or was
-- cut off, a waiter was frozen right after it took the name, FLUSHALL,
-- eviction) opens nothing by itself; the look sees it and opens the name
-- to the blocked waiters.
-- Uses     clock.lua, fence.lua, publish.lua, queue.lua
-- KEYS[1]  lock key, KEYS[2] fencing counter, KEYS[3] waiter queue,
--          KEYS[4] its deadlines (as lua/lock_acquire.lua)
-- KEYS[5]  fence floor (fence.lua; always the last key)
-- ARGV[1]  the blocked waiter's token, or '' for a look at the name alone
-- ARGV[2]  the waiter's queue entry lifetime in milliseconds
-- ARGV[3]  grant prefix (queue.lua)
-- ARGV[4]  the usual claim window of a hand-over, in milliseconds: what
--          this look's rules measure grants by
-- ARGV[5]  wake-up channel, ARGV[6] wake-up message, ARGV[7] 'queued' or
--          '' (queue.lua announce)
-- ARGV[8]  claim window of a hand-over made here, in milliseconds: ARGV[4],
--          or longer right after a Cluster slot moved (src/protocol/
--          timing.rs hand_over_claim)
-- Returns  milliseconds until the next look is useful (the lock's
--          remaining lease, or ARGV[8] after a hand-over made here),
--          or 0: no more looks (a look at the name alone that found a
--          holder past its first lease, or nobody waiting). Errors only on
--          data redlease did not write (a fencing counter or fence floor:
--          REDLEASE_FOREIGN, fence.lua, before writing anything): in a
--          pipelined renewal batch that reply is this look's alone
--          (Node::eval_batch), and the look is tried again. A look at a
--          held lock is two calls.
local lock, counter, q, qt = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local me, ttl, prefix, claim = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local pttl = redis.call('PTTL', lock)
if pttl > 0 then
  -- A grant its pop took runs a claim window until its taker claims it
  -- (one its script took, twice that): past that, the holder is alive.
  -- Short of it, look again when it would lapse. A look at the name alone
  -- comes after the claim window of the grant it is for (the release's),
  -- so a grant open or popped now is a later one, whose own releaser (or
  -- waiter) looks after it: under contention each release's look would
  -- otherwise chase the next holder's.
  if me == '' then
    local open = string.match(redis.call('GET', lock) or '', '^[^#]*') == 'rl:grant'
    -- Open longer than any claim window of ours: a release right after a
    -- Cluster slot move opened it for longer (SETTLING_CLAIM, src/
    -- protocol/timing.rs), and this look may be for that very grant:
    -- look again when it would lapse (found by the model checker, check/:
    -- a taker that died with the releaser gone left the name free 2 s,
    -- past the claim + 1 s).
    if open and pttl > claim then
      return pttl
    end
    if open or pttl > claim * 2 then
      return 0
    end
  end
  -- A waiter whose entry is gone (the queue was purged or lapsed while
  -- its process was paused, or flushed) is queued again: the holder's
  -- release hands the name on only to a queue, and would otherwise end
  -- with the name free and this waiter blocked until its next look (found
  -- by the model checker, check/: "3 waiters, one frozen").
  if me ~= '' and not redis.call('ZSCORE', qt, me) then
    -- Not a waiter that took the name (its claim left the queue, and this
    -- look, made before, ran after it): queued again, it would stand at
    -- the head for nobody, and a waiter that waits for messages behind
    -- it could not take the next hand-over before the claim window had
    -- passed (found by the model checker, check/: "one's block cut").
    if string.match(redis.call('GET', lock) or '', '^[^#]*') == me then
      return 0
    end
    queue_join(q, qt, prefix, me, ttl, true)
  end
  return pttl
end
if pttl == -1 then
  -- No expiry: not written by redlease (lock_acquire.lua reports it).
  return me == '' and 0 or 30000
end
if pttl == 0 then
  return 1 -- under a millisecond left
end
-- The usual look (a holder alive, or a key nobody's) ends above, before
-- the hand-over's definitions are made (src/protocol/scripts compose).
-- (the rest of the preludes)
-- As in lock_acquire.lua: a hand-over whose claim window passed untaken.
queue_untaken(q, qt, prefix)
if me ~= '' then
  -- Still waiting (the queue may have lapsed, been purged or flushed).
  queue_join(q, qt, prefix, me, ttl, true)
elseif redis.call('EXISTS', q) == 0 then
  return 0
end
local told = hand_on(lock, counter, q, qt, prefix, tonumber(ARGV[8]), ARGV[5], ARGV[6])
announce(ARGV[5], ARGV[6], ARGV[7], told)
return tonumber(ARGV[8])
