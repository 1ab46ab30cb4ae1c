-- Take k permits of an expiring semaphore (optionally in FIFO order). A
-- waiter queues; a release offers the free permits to the blocked waiters
-- (sem_grant.lua sem_offer), and the one blocked longest takes them if they
-- fit.
-- Uses     publish.lua, sem_grant.lua
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
-- Returns  {1, 0} acquired, with the lease set to ARGV[2] (taken by a pop:
--          the lesser of that and twice ARGV[9], which the client raises
--          at once); again when the same member asks again (a retry after
--          a lost reply re-grants, it never takes a second permit);
--          {0, ms} wait (ms until the first permit expires, or the claim
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
-- What this waiter's pop (right before this script) took from the open
-- list. (An ACL without LPOP refused the pop too: nothing was taken.)
local took = ARGV[12] == 'popped' and redis.pcall('LPOP', mine)
if type(took) == 'table' then
  took = false
  if redis.call('EXISTS', mine) == 1 then
    redis.call('DEL', mine)
    return redis.error_reply('NOPERM redlease needs LPOP with BLMOVE (see the README ACL line)')
  end
end
local passes = took and (tonumber(took) or 0)
local now = sem_now()
local stored = redis.call('GET', count)
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
  return {1, 0}
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
end
if took then
  -- The blocked waiter Redis served first: the free permits are offered to
  -- it before anyone else, unless (fair) another took an offer it could
  -- not use and waits first in line; that one is blocked too, and gets
  -- the offer passed on to it. Passed on as often as waiters are queued
  -- without reaching it, it is not blocked any more: it died or left.
  local head = fair and redis.call('GET', prefix .. 'head')
  if head and head ~= me then
    if redis.call('ZSCORE', qt, head) and passes + 1 < redis.call('ZCARD', qt) then
      sem_pass(prefix, claim, passes + 1)
      queue()
      return {0, claim}
    end
    redis.call('DEL', prefix .. 'head')
  end
  if used + k <= n then
    take(math.min(tonumber(ARGV[2]), claim * 2))
    if head == me then
      redis.call('DEL', prefix .. 'head')
    end
    sem_close(prefix)
    -- What is left goes on to the next waiter.
    sem_offer(keys, n, fair, prefix, claim, now, ARGV[10], ARGV[11])
    return {1, 0}
  end
  queue()
  if fair then
    -- First in line now: nobody passes it, and the next offer comes when
    -- its permits are free.
    redis.call('SET', prefix .. 'head', me, 'PX', math.max(ttl, claim) * 2)
    sem_close(prefix)
  elseif passes + 1 < redis.call('ZCARD', qt) then
    sem_pass(prefix, claim, passes + 1) -- a smaller request may fit
  else
    sem_close(prefix)
  end
  return {0, wait_ms()}
end
sem_purge(keys, prefix)
-- An offer in flight is the blocked waiters' first; in a fair semaphore so
-- is every permit while others are queued. A waiter that waits for
-- messages cannot pop: it takes what fits when told.
local queued = redis.call('ZSCORE', qt, me)
local offered = redis.call('EXISTS', prefix .. 'offer') == 1
local ahead = offered and not (queued and not blocks)
if fair and not ahead then
  local head = redis.call('GET', prefix .. 'head')
  if head and head ~= me then
    ahead = true
  elseif queued and not blocks then
    -- It cannot pop: its turn comes by arrival order among the waiters
    -- whose entries live.
    for _, w in ipairs(redis.call('ZRANGEBYSCORE', qt, '-inf', now)) do
      sem_leave(keys, prefix, w, true)
    end
    local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    ahead = first ~= nil and first ~= me
  else
    ahead = redis.call('ZCARD', qt) > (queued and 1 or 0)
  end
end
if not ahead and used + k <= n then
  take(tonumber(ARGV[2]))
  return {1, 0}
end
queue()
-- Free permits and waiters first in line, yet no offer (the holder's lease
-- ran out with nobody to hand its permits on, or the waiters ahead died):
-- offer them now. If the waiters ahead are gone, this one takes the offer.
if used < n and sem_offer(keys, n, fair, prefix, claim, now, ARGV[10], ARGV[11]) then
  return {0, claim}
end
return {0, wait_ms()}
