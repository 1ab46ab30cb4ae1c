-- Take k permits of an expiring semaphore (optionally in FIFO order). A
-- waiter queues; a release offers the free permits to the blocked waiters
-- (sem_grant.lua sem_offer), and the one blocked longest takes them if they
-- fit.
-- Uses     clock.lua, took.lua, publish.lua, sem_grant.lua
-- KEYS[1]  permits: sorted set, member = "<k>:<token>", score = the permit's
--          expiry in server time (ms); expired permits are reclaimed here
-- KEYS[2]  permit count N while any permit is held (lives as long as KEYS[1])
-- KEYS[3]  fair mode: queue (sorted set, member -> arrival order)
-- KEYS[4]  waiters' deadlines (sorted set, member -> server ms): what tells
--          a release that someone waits
-- ARGV[1]  member "<k>:<token>"
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  N, the caller's idea of the permit count
-- ARGV[4]  k, permits wanted (1 <= k <= N)
-- ARGV[5]  '1' for FIFO order, '0' otherwise
-- ARGV[6]  waiter entry lifetime, ms; 0 = do not queue (a try never does)
-- ARGV[7]  'block': this waiter blocks in BLMOVE from the open list to its
--          own list (sem_grant.lua); otherwise it waits for messages
-- ARGV[8]  grant prefix (sem_grant.lua)
-- ARGV[9]  claim window of an offer, in milliseconds
-- ARGV[10] wake-up channel, ARGV[11] wake-up message: for an offer made
--          from here, to waiters that wait for messages
-- ARGV[12] 'popped' (optional): this script runs right behind that pop: a
--          value found on the waiter's own list is an offer it took
-- Returns  0 (an integer: no fence) acquired, with the lease set to ARGV[2]
--          (taken by a pop: the lesser of that and twice ARGV[9], which the
--          client raises at once); again when the same member asks again
--          (a retry after a lost reply re-grants, it never takes a second
--          permit);
--          ms (text): wait (ms until the first permit expires, or the claim
--          window of an offer made or passed on from here; -1 unknown)
-- Errors   REDLEASE_MISMATCH when holders use another permit count;
--          WRONGTYPE / REDLEASE_FOREIGN when the keys hold foreign data
--          (another type, a permit that never expires).
local keys = {KEYS[1], KEYS[2], KEYS[3], KEYS[4]}
local permits, count, qt = KEYS[1], KEYS[2], KEYS[4]
local me, n, k = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4])
local fair, ttl, blocks = ARGV[5] == '1', tonumber(ARGV[6]), ARGV[7] == 'block'
local prefix, claim = ARGV[8], tonumber(ARGV[9])
local mine = prefix .. me
-- What this waiter's pop (right before this script) took (took.lua).
local took = took_from_open(mine, ARGV[12] == 'popped')
if took == nil then
  -- An offer it cannot read: the next waiter's.
  sem_pass(prefix, claim, 0)
  return redis.error_reply(NOPERM_POP)
end
local passes = took and (tonumber(took) or 0)
local now = now_ms()
local stored = redis.call('GET', count)
-- A free semaphore, in one call: no permit held, nobody queued or first in
-- line, no offer open or left behind, and this member took no offer. None
-- of the checks below can then find anything, and this permit's lease is
-- the set's whole life. (The count was read first: a foreign type there
-- is an error, not overwritten.)
if not took and k <= n and redis.call('EXISTS', permits, KEYS[3], qt, prefix .. 'open',
    prefix .. 'offer', prefix .. 'head', prefix .. 'told') == 0 then
  redis.call('ZADD', permits, now + tonumber(ARGV[2]), me)
  redis.call('PEXPIRE', permits, ARGV[2])
  redis.call('SET', count, ARGV[3], 'PX', ARGV[2])
  return 0
end
-- (the rest of the preludes)
local used = sem_used(permits, now)
-- redlease scores every permit with a finite expiry; one that never
-- expires would hold its permits forever.
local top = redis.call('ZRANGE', permits, -1, -1, 'WITHSCORES')
if top[2] and tonumber(top[2]) == math.huge then
  return redis.error_reply('REDLEASE_FOREIGN a permit never expires (score +inf; redlease always sets one)')
end
local function lives(ms)
  redis.call('ZADD', permits, now + ms, me)
  local last = redis.call('ZRANGE', permits, -1, -1, 'WITHSCORES')
  local life = tonumber(last[2]) - now
  redis.call('PEXPIRE', permits, life)
  return life
end
if redis.call('ZSCORE', permits, me) then
  local life = lives(tonumber(ARGV[2]))
  if stored then
    redis.call('PEXPIRE', count, life)
  end
  sem_leave(keys, prefix, me, fair)
  if took then
    sem_pass(prefix, claim, passes) -- not ours to use: the next one's
  end
  return 0
end
if used == 0 then
  stored = nil
end
if stored and tonumber(stored) ~= n then
  if took then
    sem_pass(prefix, claim, passes)
  end
  return redis.error_reply('REDLEASE_MISMATCH this semaphore has ' .. stored ..
    ' permits, the handle says ' .. ARGV[3])
end
local function wait_ms()
  local first = redis.call('ZRANGE', permits, 0, 0, 'WITHSCORES')
  if first[2] then
    return tonumber(first[2]) - now
  end
  return -1
end
local function queue()
  if ttl > 0 then
    sem_join(keys, prefix, me, ttl, fair, blocks, now)
  end
end
local function take(ms)
  redis.call('SET', count, ARGV[3], 'PX', lives(ms))
  sem_leave(keys, prefix, me, fair)
  -- First in line no more: a place kept there would refuse the others.
  if fair and redis.call('GET', prefix .. 'head') == me then
    redis.call('DEL', prefix .. 'head')
  end
end
-- The first live waiter in arrival order (fair), dropping lapsed entries.
local function first_in_line()
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', qt, '-inf', now)) do
    sem_leave(keys, prefix, w, true)
  end
  return redis.call('ZRANGE', KEYS[3], 0, 0)[1]
end
if took then
  -- The blocked waiter Redis served first: blocked longest. In a fair
  -- semaphore the offer is first the earliest arrival's, which may be
  -- blocked behind us (it blocked again after a 60 s wait, or took an
  -- offer too small for it and keeps its place): it is passed on to it,
  -- or, if it waits for messages, left to it. Passed on as often as
  -- waiters are queued without reaching it, those ahead are not blocked
  -- (they died, or look without blocking): they lose their place.
  if fair then
    local first = first_in_line()
    if first and first ~= me then
      -- Left to those ahead that wait for messages, told of it now: one
      -- alive looks within the claim window; the rest lose their place
      -- when it lapses (sem_owed_lapsed).
      local function owe()
        sem_owe(keys, prefix, me, claim)
        publish(ARGV[10], ARGV[11])
        queue()
        return string.format('%d', claim)
      end
      if redis.call('ZSCORE', prefix .. 'told', first) then
        return owe()
      end
      if passes + 1 < redis.call('ZCARD', qt) then
        sem_pass(prefix, claim, passes + 1)
        queue()
        return string.format('%d', claim)
      end
      -- Those ahead of us that are not blocked lose their place. Their
      -- entries stay three claim windows at most: one between two round
      -- trips (its busy reply on its way) blocks next, and a release
      -- must still offer to it. Removed, a release found nobody queued
      -- and offered nothing, and it waited for its own look, timed by a
      -- lease that had ended early (found by the model checker, check/:
      -- "fair semaphore: a waiter for messages first, one blocked
      -- behind, 1 crash"). One that died lapses then.
      local short, told_ahead = now + claim * 3, false
      for _, w in ipairs(sem_ahead(keys, me)) do
        if redis.call('ZSCORE', prefix .. 'told', w) then
          told_ahead = true
        else
          redis.call('ZREM', KEYS[3], w)
          local until_ms = tonumber(redis.call('ZSCORE', qt, w))
          if until_ms and until_ms > short then
            redis.call('ZADD', qt, string.format('%d', short), w)
          end
        end
      end
      if told_ahead then
        -- Waiters that wait for messages are still ahead: the offer is
        -- left to them, as above. Taken here, a later blocked waiter
        -- passed a live one (found by a review: a blocked waiter between
        -- two round trips first, one that waits for messages second).
        return owe()
      end
    end
  end
  local head = fair and redis.call('GET', prefix .. 'head')
  if used + k <= n then
    take(math.min(tonumber(ARGV[2]), claim * 2))
    if head then
      redis.call('DEL', prefix .. 'head')
    end
    sem_close(prefix)
    -- What is left goes on to the next waiter.
    sem_offer(keys, n, fair, prefix, claim, now, ARGV[10], ARGV[11])
    return 0
  end
  queue()
  if fair then
    -- First in line: nobody passes it, and the next offer comes when its
    -- permits are free. Its process keeps the place while it lives
    -- (lua/sem_watch.lua).
    redis.call('SET', prefix .. 'head', me, 'PX', claim * 3)
    sem_close(prefix)
  elseif passes + 1 < redis.call('ZCARD', qt) then
    sem_pass(prefix, claim, passes + 1) -- a smaller request may fit
  else
    -- Nobody blocked can use them: no more offers until more are free.
    sem_close(prefix)
    redis.call('SET', prefix .. 'spent', string.format('%d', n - used), 'PX', claim * 150)
  end
  return string.format('%d', wait_ms())
end
sem_purge(keys, prefix)
-- It looked: alive, it keeps its place behind an offer left to it.
redis.call('ZREM', prefix .. 'owed', me)
-- An offer in flight is the blocked waiters' first; in a fair semaphore
-- every permit is the earliest arrival's. A waiter that cannot pop (it
-- waits for messages, or has no connection to block on) takes what fits
-- when it looks.
local queued = redis.call('ZSCORE', qt, me)
local offered = redis.call('EXISTS', prefix .. 'offer') == 1
local ahead = offered and not (queued and not blocks)
if fair then
  local head = redis.call('GET', prefix .. 'head')
  if head and head ~= me then
    ahead = true
  elseif queued then
    local first = first_in_line()
    ahead = first ~= nil and first ~= me
  else
    ahead = redis.call('ZCARD', qt) > 0
  end
end
if not ahead and used + k <= n then
  take(tonumber(ARGV[2]))
  if offered then
    -- Taken beside the blocked: what is left is offered anew.
    sem_close(prefix)
    sem_offer(keys, n, fair, prefix, claim, now, ARGV[10], ARGV[11])
  end
  return 0
end
queue()
if ttl > 0 and redis.call('EXISTS', prefix .. 'open') == 1 and sem_blocked_waiting(prefix, qt) then
  -- Queued while an offer waits on the open list (nobody blocked took
  -- it): this waiter may block before the older ones and take it, so they
  -- watch it too, as a lock's do (lua/lock_acquire.lua). Else a taker that
  -- died or froze held it past its claim, with nobody to look until the
  -- older waiters' own looks, timed by a lease that had ended early (found
  -- by the model checker, check/: "fair semaphore: a waiter for messages
  -- first, one blocked behind, 1 crash").
  sem_name_watchers(keys, fair, prefix, ARGV[10], ARGV[11])
end
-- This attempt kept its place first in a fair line (waiting for messages).
local kept = false
if fair and not ahead and queued and not blocks then
  -- First in a fair line, waiting for messages, with a request that does
  -- not fit: as a blocked one that took too small an offer (above), it
  -- keeps its place, and an offer in flight (every permit is its) is
  -- ended. Else that offer lapsed untaken, the next look purged the line
  -- as if this waiter were gone, and a smaller request behind it took
  -- the permits first (found by the model checker, check/: "fair
  -- semaphore: 3 permits, clients asking 2, 2 and 1").
  redis.call('SET', prefix .. 'head', me, 'PX', claim * 3)
  sem_close(prefix)
  kept = true
end
-- Free permits and waiters first in line, yet no offer (the holder's lease
-- ran out with nobody to hand its permits on, or the waiters ahead died):
-- offer them now. If the waiters ahead are gone, this one takes the offer.
if used < n and sem_offer(keys, n, fair, prefix, claim, now, ARGV[10], ARGV[11]) then
  return string.format('%d', claim)
end
local wait = wait_ms()
if fair then
  -- Behind one first in line whose request does not fit: look when its
  -- place would lapse, should it die (lua/sem_watch.lua).
  local held = redis.call('PTTL', prefix .. 'head')
  if held > 0 then
    if redis.call('GET', prefix .. 'head') ~= me then
      wait = held + 50
    elseif kept then
      -- First in line and waiting for messages: it keeps its place by
      -- its attempts, so the next comes before that place lapses. At the
      -- fallback poll (2 s, past the place's 1.5 s) the place lapsed
      -- between attempts, the waiters behind looked then and offered
      -- what was free to the line, and every waiter woke to try: 38-56
      -- commands a second each, with 4 waiters. Only when this attempt
      -- renewed it: a waiter no longer first kept asking again in a
      -- millisecond as its old place ran out (a review).
      wait = math.max(1, held - math.floor(claim / 5))
    end
  end
end
-- An offer in flight that is not ours (on the open list for a blocked
-- waiter, left to one ahead that waits for messages, or made to the one
-- first in line): when its claim window ends, a look purges or passes
-- over those it was for. Said as the wait, so that a waiter that cannot
-- watch hand-overs (it waits for messages) looks then, not a fallback
-- poll or a place's life later, when the waiter the offer was for died
-- and the releaser exited (found by the model checker, check/: "fair
-- semaphore: a waiter for messages first, one blocked behind, 1 crash").
-- PTTL 0 is an offer in its last millisecond: asked again in one, not at
-- the fallback poll (by then the open list had lapsed unpurged, and a
-- dead head of a line of waiters for messages stalled it 7 s: a review).
local pending = redis.call('PTTL', prefix .. 'offer')
if pending >= 0 and (wait < 0 or pending < wait) then
  wait = math.max(1, pending)
end
return string.format('%d', wait)
