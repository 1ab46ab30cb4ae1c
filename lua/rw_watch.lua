-- A look at a read-write lock's write hold, made by the process's renewal
-- thread in its pipeline: for a writer blocked on it (on another
-- connection, so it keeps its place among the blocked), and once after a
-- hand-over or a shortened write lease. A hold that goes without a release
-- (its holder died or was cut off, a writer was frozen right after it took
-- the hold, FLUSHALL, eviction) opens nothing by itself; the look sees it
-- and opens the write hold to the blocked writers, or, if none is left,
-- tells the waiting readers.
-- Uses     clock.lua, fence.lua, publish.lua, queue.lua, rw_grant.lua
-- KEYS     as every read-write lock script (src/rwlock.rs Keys::scripted):
--          KEYS[1] writer key ("<owner token>#<fence>", or "rl:grant#<fence>"
--          while open to the queued writers), KEYS[2] readers (sorted
--          set: reader token -> expiry, server ms), KEYS[3] fencing counter
--          (fence.lua), KEYS[4] writer queue and KEYS[5] its deadlines
--          (queue.lua), KEYS[6] waiting readers (rw_read_acquire.lua),
--          KEYS[7] fence floor (fence.lua; always the last key)
-- ARGV[1]  the blocked writer's token, or '' for a look at the name alone
-- ARGV[2]  the writer's queue entry lifetime in milliseconds
-- ARGV[3]  grant prefix (queue.lua, rw_grant.lua)
-- ARGV[4]  claim window of a hand-over, in milliseconds
-- ARGV[5]  wake-up channel, ARGV[6] wake-up message
-- Returns  milliseconds until the next look is useful (the write lease's
--          or the first reader's end, or the claim of a hand-over made
--          here), or 0: no more looks (a look at the name alone with
--          nothing left to do). Errors only on data redlease did not write
--          (a fencing counter or fence floor: REDLEASE_FOREIGN, fence.lua,
--          before writing anything): in a pipelined renewal batch that
--          reply is this look's alone (Node::eval_batch), and the look is
--          tried again. A look at a write-held lock is one call, at a
--          read-held one four (five and the mark while readers wait behind
--          the writer: it marks the writers alive, and looks again within
--          five claims).
local writer, readers, counter, q, qt = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local me, ttl, prefix, claim = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local pttl = redis.call('PTTL', writer)
if pttl > 0 then
  if me == '' and pttl > claim * 2 then
    return 0 -- a holder past its first lease: alive
  end
  return pttl
end
if pttl == -1 then
  return me == '' and 0 or 30000 -- not written by redlease
end
if pttl == 0 then
  return 1
end
local now = now_ms()
local first = redis.pcall('ZRANGEBYSCORE', readers, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if first.err then
  return me == '' and 0 or 30000 -- not written by redlease
end
if first[2] and me ~= '' then
  -- Read-held: the writers' turn comes when the readers leave, unless a
  -- hand-over or a probe lies untaken on the open list (below). One EXISTS
  -- asks for the open list and the waiting readers at once, a second only
  -- when just one of them is there: a writer behind a read hold that
  -- nobody else waits for looks in four calls, not five.
  local found = redis.call('EXISTS', prefix .. 'open', KEYS[6])
  local open = found == 2 or (found == 1 and redis.call('EXISTS', prefix .. 'open') == 1)
  if not open then
    -- New readers wait behind a live writer (rw_grant.lua): this look says
    -- it lives, every five claims while readers wait, which costs the
    -- server far less than the probes they would push once the mark lapsed.
    local wait = math.max(1, tonumber(first[2]) - now)
    if found == 1 then
      rw_alive(prefix, claim)
      wait = math.min(wait, claim * 5)
    end
    return wait
  end
end
-- The usual look (a writer alive, or readers holding) ends above, before
-- the hand-over's definitions are made (src/protocol/scripts compose).
-- (the rest of the preludes)
-- A hand-over or a probe nobody took: the writers queued are gone.
rw_stale(writer, q, qt, prefix)
if me ~= '' then
  -- Still waiting (the queue may have lapsed, been purged or flushed).
  queue_join(q, qt, prefix, me, ttl, true)
elseif redis.call('EXISTS', q) == 0 then
  -- Free, and no writer waits (the last went without a release, or its
  -- lease was shortened and ran out): waiting readers may go in.
  if redis.call('ZCOUNT', KEYS[6], '(' .. now, '+inf') > 0 then
    publish(ARGV[5], ARGV[6])
  end
  return 0
end
if rw_open(writer, readers, counter, q, qt, KEYS[6], prefix, claim, ARGV[5], ARGV[6], now) then
  return claim
end
if first[2] and me ~= '' then
  return math.max(1, tonumber(first[2]) - now)
end
return 0
