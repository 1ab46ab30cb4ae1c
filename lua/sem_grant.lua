-- Prelude (prepended to the scripts that name it in their "Uses" line; needs
-- clock.lua and publish.lua before it): the hand-over of a semaphore's free permits to
-- its waiters, as queue.lua does for a lock.
-- KEYS     none of its own (callers pass the keys)
-- ARGV     none of its own
-- Returns  nothing; defines
--   sem_used(permits, now) -> permits in use; reclaims expired ones
--   sem_join(keys, prefix, member, ttl_ms, fair, blocks, now): queues a
--     waiter (keys = {permits, count, queue, deadlines} as in
--     sem_acquire.lua): its deadline entry lives ttl_ms, and a fair one
--     keeps its place in arrival order. One that does not block (it waits
--     for messages) is listed in prefix..'told' too, so that an offer
--     publishes for it.
--   sem_leave(keys, prefix, member, fair): withdraws a waiter's entries
--   sem_offer(keys, n, fair, prefix, claim_ms, now, channel, message, freed)
--     -> whether an offer was made. `freed`: the caller freed permits
--     (a release, a forced release, a resize) or a waiter left (the offer
--     in flight may have been its); with an offer in flight the waiters
--     that wait for messages are then told to look again. Offers the free permits to the
--     waiters: pushes an offer onto the open list prefix..'open' (its
--     value: how often waiters passed it on) and marks it in flight for
--     claim_ms (prefix..'offer'). Blocking waiters are blocked in BLMOVE
--     from the open list to their own list prefix..member, each with its
--     acquire script pipelined behind; Redis serves the connection
--     blocked longest first, and that script takes its permits if they
--     fit, or passes the offer on (sem_acquire.lua). A waiter that died
--     has no connection, so it is never served: however many died, they
--     stall nobody. An offer still on the list after its claim window
--     proves nobody was blocked for all of it: the next look purges the
--     queue (sem_purge). Offers nothing when nobody waits, nothing is
--     free, an offer is in flight, or (fair) the waiter at the head
--     (prefix..'head', one that took an offer it could not use) does
--     not fit yet, or (plain) the last offer went round every blocked
--     waiter unused and no more is free since (prefix..'spent'). Publishes
--     for waiters that wait for messages, and names the offer's watchers
--     (sem_name_watchers).
--   sem_name_watchers(keys, fair, prefix, channel, message): names an
--     offer's watchers (the oldest waiters, publish.lua name_watchers_spaced),
--     unless watchers were named in the last 50 ms (prefix..'named')
--   sem_pass(prefix, claim_ms, passes): puts an offer back for the next
--     blocked waiter, for what the offer had left if longer (a release
--     right after a Cluster slot move offered for longer: SETTLING_CLAIM,
--     src/protocol/timing.rs)
--   sem_offered_for(prefix, claim_ms) -> the claim window of the offer in
--     flight: claim_ms, or what it has left if more
--   sem_close(prefix): ends the offer in flight (and what it owed)
--   sem_blocked_waiting(prefix, qt) -> whether a queued waiter blocks
--     (is not on the list of those told by messages)
--   sem_ahead(keys, me) -> the waiters ahead of me in a fair line
--   sem_owe(keys, prefix, me, claim): a fair offer a blocked waiter (me)
--     popped is left to the waiters that wait for messages ahead of it in
--     line: they are listed in prefix..'owed', and the offer stays in
--     flight (no longer on the open list) for the rest of its claim window
--     (the list outlives it, however long it was offered for)
--   sem_owed_lapsed(keys, prefix) -> whether an offer owed to waiters that
--     wait for messages lapsed untaken: those that did not look in its
--     claim window (they died, froze or lost the message) lose their place
--   sem_purge(keys, prefix) -> whether the open list outlived its offer
--     (and the queue was purged: its entries are of waiters that died or
--     left, or that did not take an offer they were told of; live ones
--     queue again when they look). The list of waiters that wait for
--     messages stays, so that the next release tells them.
local function sem_used(permits, now)
  redis.call('ZREMRANGEBYSCORE', permits, '-inf', now)
  local used = 0
  for _, m in ipairs(redis.call('ZRANGE', permits, 0, -1)) do
    used = used + (tonumber(string.match(m, '^(%d+):')) or 1)
  end
  return used
end

-- Lengthens (never shortens) a key's life to at least ms: waiters renew at
-- different paces, and a quick one must not cut it short under a slow one.
local function sem_live_for(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

local function sem_join(keys, prefix, member, ttl, fair, blocks, now)
  local q, qt = keys[3], keys[4]
  if fair then
    if not redis.call('ZSCORE', q, member) then
      local last = redis.call('ZRANGE', q, -1, -1, 'WITHSCORES')
      local order = 1
      if last[2] then order = tonumber(last[2]) + 1 end
      redis.call('ZADD', q, order, member)
    end
    -- At every join, as the deadlines' key: lengthened only when a member
    -- was added, the order lapsed under a quiet line whose waiters were
    -- all still there, and a newcomer came first (a review).
    sem_live_for(q, ttl * 2)
  end
  redis.call('ZADD', qt, string.format('%d', now + ttl), member)
  sem_live_for(qt, ttl * 2)
  if not blocks then
    local told = prefix .. 'told'
    redis.call('ZADD', told, string.format('%d', now + ttl), member)
    sem_live_for(told, ttl * 2)
  end
end

local function sem_leave(keys, prefix, member, fair)
  redis.call('ZREM', keys[4], member)
  redis.call('ZREM', prefix .. 'told', member)
  redis.call('ZREM', prefix .. 'owed', member)
  if fair then
    redis.call('ZREM', keys[3], member)
  end
end

-- The claim window of the offer in flight: `claim`, or what it has left
-- if more (a release right after a Cluster slot move offered for longer,
-- and a waiter that passes it on, or owes it, says the usual window).
local function sem_offered_for(prefix, claim)
  return math.max(claim, redis.call('PTTL', prefix .. 'offer'))
end

local function sem_pass(prefix, claim, passes)
  local open = prefix .. 'open'
  local ms = sem_offered_for(prefix, claim)
  redis.call('RPUSH', open, string.format('%d', passes))
  -- Times as text (queue.lua hand_on).
  redis.call('PEXPIRE', open, string.format('%d', ms * 2))
  redis.call('SET', prefix .. 'offer', '1', 'PX', string.format('%d', ms))
end

local function sem_close(prefix)
  redis.call('DEL', prefix .. 'open', prefix .. 'offer', prefix .. 'owed')
end

local function sem_blocked_waiting(prefix, qt)
  for _, w in ipairs(redis.call('ZRANGE', qt, 0, -1)) do
    if not redis.call('ZSCORE', prefix .. 'told', w) then
      return true
    end
  end
  return false
end

local function sem_ahead(keys, me)
  -- In the queue's order up to me (not ZRANK: the README's ACL line
  -- grants only the calls the scripts make). Not in the queue (e.g.
  -- purged): everyone queued is ahead.
  local order = redis.call('ZSCORE', keys[3], me)
  local ahead = order and redis.call('ZRANGEBYSCORE', keys[3], '-inf', order)
    or redis.call('ZRANGE', keys[3], 0, -1)
  local out = {}
  for _, w in ipairs(ahead) do
    if w == me then
      break
    end
    out[#out + 1] = w
  end
  return out
end

local function sem_owe(keys, prefix, me, claim)
  for _, w in ipairs(sem_ahead(keys, me)) do
    if redis.call('ZSCORE', prefix .. 'told', w) then
      redis.call('ZADD', prefix .. 'owed', 0, w)
    end
  end
  -- Outlives the offer: found after it, it names those that let it lapse.
  local ms = sem_offered_for(prefix, claim)
  redis.call('PEXPIRE', prefix .. 'owed', string.format('%d', ms * 3))
  redis.call('DEL', prefix .. 'open')
  if redis.call('EXISTS', prefix .. 'offer') == 0 then
    redis.call('SET', prefix .. 'offer', '1', 'PX', string.format('%d', claim))
  end
end

local function sem_owed_lapsed(keys, prefix)
  if redis.call('EXISTS', prefix .. 'owed') == 0 or redis.call('EXISTS', prefix .. 'offer') == 1 then
    return false
  end
  -- Told of an offer left to them and silent through its claim window:
  -- kept, each look made the offer again, the blocked waiters left it to
  -- them again, and the name stayed free until their entries lapsed
  -- (seconds; minutes with a long fallback poll). A live one queues again
  -- when it looks.
  local head = redis.call('GET', prefix .. 'head')
  for _, w in ipairs(redis.call('ZRANGE', prefix .. 'owed', 0, -1)) do
    sem_leave(keys, prefix, w, true)
    if w == head then
      redis.call('DEL', prefix .. 'head')
    end
  end
  redis.call('DEL', prefix .. 'owed')
  return true
end

local function sem_purge(keys, prefix)
  sem_owed_lapsed(keys, prefix)
  if redis.call('EXISTS', prefix .. 'open') == 1 and redis.call('EXISTS', prefix .. 'offer') == 0 then
    -- Nobody took the offer in its claim window: nobody blocked was there
    -- to pop it, and the waiters that wait for messages, told of it, did
    -- not take it either (they died, froze or lost the message). Their
    -- entries go too: kept, each lapsed offer was made again for them, one
    -- claim window after another until their entries' deadlines (seconds),
    -- with nobody holding. Live ones queue again when they look. (Found
    -- by the model checker, check/: "semaphore: ... waiting for messages".)
    -- The list of those told stays (it lapses with their entries' lives):
    -- one that is alive may have looked and found the offer too small for
    -- its request, and the next release must tell it, or it sleeps
    -- through it (found by the model checker, check/: "semaphore: 3
    -- permits, clients asking 2, 2 and 1"). Told at once instead, every
    -- look made them all ask again, twice a second.
    redis.call('DEL', prefix .. 'open', keys[3], keys[4], prefix .. 'head', prefix .. 'spent')
    return true
  end
  return false
end

-- Names an offer's watchers (the first five in line, or of the queue:
-- publish.lua name_watchers_spaced keeps one per client, three at most),
-- unless watchers were named in the last 50 ms.
local function sem_name_watchers(keys, fair, prefix, channel, message)
  name_watchers_spaced(prefix .. 'named', channel, message, function()
    return redis.call('ZRANGE', fair and keys[3] or keys[4], 0, 4)
  end)
end

local function sem_offer(keys, n, fair, prefix, claim, now, channel, message, freed)
  local permits, qt = keys[1], keys[4]
  sem_owed_lapsed(keys, prefix)
  if redis.call('EXISTS', qt) == 0 or redis.call('EXISTS', prefix .. 'offer') == 1 then
    -- Nobody queued (the line was purged), or an offer in flight: an
    -- offer names only what was free when it was made, and is made for
    -- whoever is first. A blocked waiter that pops it counts the permits
    -- then; one that waits for messages must be told, or a request the
    -- offer was too small for sleeps through the release that makes it
    -- fit, and the one behind a waiter that gave up sleeps through the
    -- offer made for that one (found by the model checker, check/:
    -- "semaphore: 3 permits, clients asking 2, 2 and 1").
    if freed and redis.call('EXISTS', prefix .. 'told') == 1 then
      publish(channel, message)
    end
    return false
  end
  local free = n - sem_used(permits, now)
  if free <= 0 then
    return false
  end
  local blocked = sem_blocked_waiting(prefix, qt)
  if not fair and not blocked then
    -- In a plain semaphore an offer serves only waiters that block: one
    -- that waits for messages takes what fits when it looks, and is told
    -- when permits are freed. Made for them too, every look and every
    -- attempt that found free permits too few for it offered them again,
    -- and the offer told every waiter to look: 60-140 commands a second
    -- each, with free permits that fit nobody.
    if freed and redis.call('EXISTS', prefix .. 'told') == 1 then
      publish(channel, message)
    end
    return false
  end
  -- The last offer went round every blocked waiter and none could use
  -- it: offer again only once more is free.
  local spent = tonumber(redis.call('GET', prefix .. 'spent'))
  if spent and free <= spent then
    return false
  end
  redis.call('DEL', prefix .. 'spent')
  local head = fair and redis.call('GET', prefix .. 'head')
  if head then
    if not redis.call('ZSCORE', qt, head) then
      redis.call('DEL', prefix .. 'head') -- it left, or its entry lapsed
    elseif (tonumber(string.match(head, '^(%d+):')) or 1) > free then
      return false -- first in line, and its permits are not free yet
    end
  end
  -- Refused (an ACL without RPUSH): waiters look again when told.
  local pushed = redis.pcall('RPUSH', prefix .. 'open', '0')
  if type(pushed) == 'table' then
    publish(channel, message)
    return false
  end
  -- Outlives the claim: found after it, it proves nobody took the offer.
  redis.call('PEXPIRE', prefix .. 'open', string.format('%d', claim * 2))
  redis.call('SET', prefix .. 'offer', '1', 'PX', string.format('%d', claim))
  if redis.call('EXISTS', prefix .. 'told') == 1 then
    publish(channel, message)
  end
  -- Its watchers: the first in line (fair), or any waiters; name_watchers_spaced
  -- keeps one per client, three at most. Only clients with a waiter that
  -- blocks watch (waiters that wait for messages are told by the publish
  -- above). No client named twice in 50 ms, as at a lock's hand-overs (queue.lua
  -- hand_on): named at every offer, waiters queueing under contention
  -- published a naming at almost every offer.
  if blocked then
    sem_name_watchers(keys, fair, prefix, channel, message)
  end
  return true
end
