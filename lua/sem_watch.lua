-- A look at a semaphore, made by the process's renewal thread in its
-- pipeline: for a waiter blocked on the semaphore (on another connection,
-- so it keeps its place among the blocked), and once after an offer. Permits
-- that go without a release (their holder died or was cut off, a waiter was
-- frozen right after it took an offer, FLUSHALL, eviction) offer nothing by
-- themselves; the look sees them free and offers them to the blocked
-- waiters (sem_grant.lua).
-- Uses     clock.lua, publish.lua, sem_grant.lua
-- KEYS[1]  permits, KEYS[2] permit count, KEYS[3] fair mode's queue,
--          KEYS[4] waiters' deadlines (as lua/sem_acquire.lua)
-- ARGV[1]  the blocked waiter's member, or '' for a look at the name alone
-- ARGV[2]  the waiter's entry lifetime in milliseconds
-- ARGV[3]  grant prefix (sem_grant.lua)
-- ARGV[4]  claim window of an offer, in milliseconds
-- ARGV[5]  wake-up channel, ARGV[6] wake-up message
-- ARGV[7]  the caller's permit count, used when no count is stored
-- ARGV[8]  '1' fair mode, '0' otherwise
-- Returns  milliseconds until the next look is useful (until the first
--          permit's lease ends, or the claim window of an offer made here;
--          first in a fair line with a request that does not fit: a
--          claim, each look keeping its place three claims; next behind it:
--          when that place would lapse), or 0: no more looks (a look at the name alone that found nothing
--          to offer). Errors only on keys redlease did not write (of
--          another type): in a pipelined renewal batch that reply is this
--          look's alone (Node::eval_batch), and the look is tried again.
--          A look at a semaphore whose permits are all held is two calls
--          (its clock and its permits), three when what is free fits no
--          blocked waiter.
local keys = {KEYS[1], KEYS[2], KEYS[3], KEYS[4]}
local me, ttl, prefix, claim = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local fair = ARGV[8] == '1'
local now = now_ms()
local held = redis.pcall('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
if held.err then
  return me == '' and 0 or 30000 -- foreign data: lua/sem_acquire.lua reports it
end
local used, soonest = 0, nil
for i = 1, #held, 2 do
  local expiry = tonumber(held[i + 1]) or 0
  if expiry > now then
    used = used + (tonumber(string.match(held[i], '^(%d+):')) or 1)
    soonest = math.min(soonest or expiry, expiry)
  end
end
if soonest and used >= tonumber(ARGV[7]) then
  -- Every permit held: nothing to offer until the first lease ends.
  return math.max(1, soonest - now)
end
local spent = tonumber(redis.call('GET', prefix .. 'spent'))
if soonest and me ~= '' and spent and tonumber(ARGV[7]) - used <= spent then
  -- What is free went round every blocked waiter unused: nothing to offer
  -- until more is free (lua/sem_grant.lua).
  return math.max(1, soonest - now)
end
-- The usual look (every permit held) ends above, before the offer's
-- definitions are made (src/protocol/scripts compose).
-- (the rest of the preludes)
sem_purge(keys, prefix)
local head = fair and redis.call('GET', prefix .. 'head')
if me ~= '' and head == me then
  -- First in a fair line with a request that does not fit yet: its place
  -- lives while its process does (lua/sem_acquire.lua).
  redis.call('PEXPIRE', prefix .. 'head', claim * 3)
  return claim
end
local n = tonumber(redis.call('GET', KEYS[2])) or tonumber(ARGV[7])
if me ~= '' then
  -- Still waiting (the queue may have lapsed, been purged or flushed).
  if not redis.call('ZSCORE', KEYS[4], me) then
    sem_join(keys, prefix, me, ttl, fair, true, now)
  end
elseif redis.call('EXISTS', KEYS[4]) == 0 then
  return 0
end
local offer = redis.call('PTTL', prefix .. 'offer')
if offer ~= -2 then
  -- An offer open longer than a claim window: a release right after a
  -- Cluster slot move made it (SETTLING_CLAIM, src/protocol/timing.rs),
  -- and a look at the name alone may be for that very offer: look again
  -- when it would lapse (as lua/lock_watch.lua does for a grant).
  if me == '' and offer > claim then
    return offer
  end
  return claim
end
if sem_offer(keys, n, fair, prefix, claim, now, ARGV[5], ARGV[6]) then
  return claim
end
if me == '' then
  return 0
end
if head and redis.call('ZRANGE', KEYS[3], 1, 1)[1] == me then
  -- Next in line behind one whose request does not fit: should that one
  -- die, its place lapses, and this look offers what is free.
  return math.max(1, redis.call('PTTL', prefix .. 'head')) + 50
end
if soonest then
  return math.max(1, soonest - now)
end
-- Nothing held and nothing offered: the waiters ahead do not fit yet, or
-- nothing has been taken yet; a release offers.
return 30000
