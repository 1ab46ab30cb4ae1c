-- Prelude (prepended to the scripts that name it in their "Uses" line; needs
-- clock.lua, fence.lua and publish.lua before it): the waiter queue of an exclusive
-- name, and the hand-over of the name to whichever waiter is alive to take
-- it.
-- KEYS     none of its own (callers pass the keys)
-- ARGV     none of its own
-- Returns  nothing; defines
--   queue_join(q, qt, prefix, token, ttl_ms, blocks, turn): puts token in
--     the queue once, in order of arrival (q: sorted set, score = server
--     microseconds), and gives it ttl_ms more to live (qt: sorted set,
--     score = deadline in server ms). A waiter that does not block (it
--     waits for release messages) is also listed in prefix..'told', so
--     that a hand-over publishes for it, and a fair one (turn: its place
--     among the blocked was lost) in prefix..'turns' too (see offer).
--   queue_leave(q, qt, prefix, token, blocks): blocks = it never was in the
--     told list (a waiter that blocks)
--   queue_head(q, qt) -> the oldest live waiter's token (or nil); drops
--     the lapsed ones on the way
--   hand_on(lock, counter, q, qt, prefix, claim_ms, channel, message,
--     queue_len) -> told
--     (queue_len: the queue's length as the caller read it (ZCARD), or nil)
--     Opens the name to its waiters for claim_ms: the lock holds
--     "rl:grant#<fence>" (a fence drawn now) and the open list
--     prefix..'open' holds that fence. Blocking waiters are blocked in
--     BLMOVE from the open list to their own list prefix..token, each
--     with its acquire script pipelined behind; Redis serves the
--     connection blocked longest first, and runs that waiter's script
--     right behind its pop, which takes the name with the waiter's lease.
--     A waiter that died has no connection, so it is never served: the
--     name goes to the oldest live blocked waiter, however many died. If
--     nobody is blocked, the fence stays on the list: a queued waiter that
--     waits for messages may take it (see lock_acquire.lua), and a list
--     still there after the claim window proves nobody was blocked for
--     all of it (the queue is then purged). The queue lapses with the
--     list unless a waiter takes the grant (see queue_taken). Returns
--     whether no message is needed (no waiter that waits for messages is queued, and the push
--     was not refused by an ACL without RPUSH).
--     It also names the hand-over's watchers on channel (the oldest
--     waiters, publish.lua name_watchers_spaced), whose clients look at the
--     name once the claim window has passed, unless watchers were named
--     in the last 50 ms (prefix..'named', which lapses by then).
--     When the queue's live head keeps its turn waiting for messages (in
--     prefix..'turns': a fair waiter a Cluster redirection, a broken
--     connection or an ACL stopped blocking), the fence is kept for it
--     (prefix..'kept' = "<token>#<fence>", see offer) instead of going
--     onto the open list, where a later waiter that blocks would pop it,
--     and a message is published for it (the returned told is false).
--   offer(q, qt, prefix, fence, twice_ms, has_turns) -> 'kept', 'open' or
--     nil (the push refused): where a hand-over's fence goes (see
--     hand_on); has_turns: whether prefix..'turns' exists, or nil to read
--     it
--   name_hand_on_watchers(q, prefix, channel, message): names the
--     watchers of a hand-over (see hand_on), unless watchers were named
--     in the last 50 ms: by the hand-over (with two waiters or more
--     queued, as hand_on's queue_len says), or by a waiter that queued
--     while it waited on the open list (lock_acquire.lua)
--   queue_untaken(q, qt, prefix): the name fell free with a hand-over's
--     claim window passed untaken: a head it was kept for is dropped (it
--     died, froze or lost its message); found on the open list, the
--     waiters that block are dropped (none was blocked all along: dead,
--     or between round trips, they queue again when they look), and
--     unless a waiter keeps its turn, everyone. A head that died costs
--     one claim window; the waiters behind it keep their order. Names
--     whose waiters all block, or wait for messages without a turn (a
--     plain lock's in their last second), are served as before turns.
--   queue_taken(q, qt, ttl_ms, blocks): a waiter whose entries live ttl_ms
--     took a hand-over; the queue lives on for the others
--   queue_take_open(lock, holder, q, qt, prefix, me, lease_ms, ttl_ms,
--     claim_ms, took, blocks, turn) -> the fence, or nil: the name is
--     open ("rl:grant#<fence>" in holder) and it is me's to take, because
--     my pop took that very fence (took), or it was kept for me, or,
--     while the fence is still on the open list (no blocked waiter was
--     there to take it), because me is queued (turn, a fair lock's
--     waiter: as the live head). A fair waiter's pop that took the turn
--     of an older waiter keeping it by messages keeps the grant for that
--     one instead (kept, with a whole claim window) and returns nil, true:
--     the caller publishes for it. A fence that is not the open grant's is
--     never a right to it: a popped grant can stand unclaimed (held_by),
--     and only its popper may take it. (The open list holds one fence at
--     most: hand_on runs only while nothing is open, and a fence goes back
--     only onto its own grant's list, lua/lock_release.lua.) Taken by a
--     pop, the lease is twice the claim, which its client raises soon
--     after: a process frozen while it was blocked holds the name no
--     longer than that.
--   held_by(v, token, fence) -> 'held' when the lock value v names token;
--     'popped' when v is the open grant of fence ("rl:grant#<fence>") and
--     token's blocking pop took that fence (its client says so: fence is
--     '' otherwise). A lock's waiter holds the name from its pop, with
--     nothing run behind it, and claims it later (lua/lock_extend.lua,
--     queue_claim). A fence is drawn once per grant and moved by one pop,
--     so no other client can name it; else nil.
--   queue_claim(lock, v, token, prefix, q, qt, ttl_ms, lease_ms): token's
--     popped grant v becomes its hold for lease_ms: the lock names it, it
--     leaves the queue, and the queue lives on for the others.
--   announce(channel, message, mode, told): publishes a release message
--     unless mode is 'queued' (every waiter of the name is in the queue)
--     and nobody needs one (told).
-- Lengthens (never shortens) a key's life to at least ms: waiters renew at
-- different paces, and a quick one must not cut it short under a slow one.
local function live_for(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

local function queue_join(q, qt, prefix, token, ttl, blocks, turn)
  if not redis.call('ZSCORE', q, token) then
    redis.call('ZADD', q, string.format('%d', now_us()), token)
  end
  local deadline = now_ms() + ttl
  redis.call('ZADD', qt, string.format('%d', deadline), token)
  live_for(q, ttl * 2)
  live_for(qt, ttl * 2)
  -- One that blocks is left where it is listed: a look made for it
  -- (lua/lock_watch.lua) may queue it again as one that blocks while it
  -- waits for messages in its last second, and must not cost it its
  -- message.
  if not blocks then
    local told = prefix .. 'told'
    redis.call('ZADD', told, string.format('%d', deadline), token)
    live_for(told, ttl * 2)
    if turn then
      local turns = prefix .. 'turns'
      redis.call('ZADD', turns, string.format('%d', deadline), token)
      live_for(turns, ttl * 2)
    end
  end
end

local function queue_leave(q, qt, prefix, token, blocks)
  redis.call('ZREM', q, token)
  redis.call('ZREM', qt, token)
  if not blocks then
    redis.call('ZREM', prefix .. 'told', token)
    redis.call('ZREM', prefix .. 'turns', token)
  end
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
      return head
    end
    redis.call('ZREM', q, head)
    redis.call('ZREM', qt, head)
  end
end

-- The five oldest waiters in the queue, passing over those whose pop took
-- an earlier grant they have not claimed (their own list prefix..token
-- still holds its fence: frozen, most likely, and never served again): the
-- hand-over's watchers, whose clients publish.lua name_watchers_spaced tells (one
-- per client, three at most). Redis hands the grant to whichever waiter
-- has been blocked longest, mostly the head, but not always (one that
-- joined later may have blocked first), so the head is named too; any
-- live one of them opens a grant its taker leaves unclaimed, and the next
-- hand-over names its own.
local function hand_on_watchers(q, prefix)
  local found = {}
  local oldest = redis.call('ZRANGE', q, 0, 4)
  if #oldest < 2 then
    -- One waiter: the taker (publish.lua name_watchers_spaced).
    return found
  end
  for _, t in ipairs(oldest) do
    if redis.call('EXISTS', prefix .. t) == 0 then
      found[#found + 1] = t
    end
  end
  return found
end

-- Where a hand-over's fence goes (see hand_on): kept for the queue's head
-- when that head keeps its turn waiting for messages (prefix..'turns'),
-- else onto the open list. Returns 'kept', 'open', or nil when
-- the push was refused (an ACL without RPUSH).
local function offer(q, qt, prefix, fence, twice, has_turns)
  local turns = prefix .. 'turns'
  if has_turns == nil then
    has_turns = redis.call('EXISTS', turns) == 1
  end
  if has_turns then
    -- The clock only here: a fair lock's waiters all block, unless a
    -- Cluster redirection, a broken connection or an ACL stopped them.
    local head = queue_head(q, qt)
    if head and redis.call('ZSCORE', turns, head) then
      redis.call('SET', prefix .. 'kept', head .. '#' .. fence, 'PX', twice)
      return 'kept'
    end
  end
  -- No open list is left from before: one is taken by a pop, removed by
  -- the waiter that takes it otherwise, or purged once it lapses.
  local open = prefix .. 'open'
  local pushed = redis.pcall('RPUSH', open, fence)
  if type(pushed) == 'table' then
    return nil
  end
  -- Outlives the claim: found after it, it proves nobody took the grant.
  redis.call('PEXPIRE', open, twice)
  return 'open'
end

-- A hand-over's claim window passed untaken (the name is free again): the
-- waiters it was for lose their places. Kept for the head: that head
-- (it waits for messages, and took no grant in a whole claim window: it
-- died, froze or lost its message). On the open list: every waiter that
-- blocks (none was blocked for all of it: they died, or were between
-- round trips, and queue again when they look), and in a queue that does
-- not keep its order, everyone. In one that does, the waiters that wait
-- for messages keep their places: the next hand-over goes to the oldest.
local function queue_untaken(q, qt, prefix)
  local open, kept, told = prefix .. 'open', prefix .. 'kept', prefix .. 'told'
  -- The usual case, one call: nothing was left untaken.
  if redis.call('EXISTS', open, kept) == 0 then
    return
  end
  local k = redis.call('GET', kept)
  if k then
    queue_leave(q, qt, prefix, string.match(k, '^[^#]*'), false)
    redis.call('DEL', kept)
  end
  if redis.call('EXISTS', open) == 0 then
    return
  end
  if redis.call('EXISTS', prefix .. 'turns') == 0 then
    redis.call('DEL', open, q, qt, told)
    return
  end
  redis.call('DEL', open)
  for _, w in ipairs(redis.call('ZRANGE', q, 0, -1)) do
    if not redis.call('ZSCORE', told, w) then
      redis.call('ZREM', q, w)
      redis.call('ZREM', qt, w)
    end
  end
end

-- Spaced 50 ms apart (publish.lua name_watchers_spaced): by the hand-over,
-- or by a waiter that queued while it waited on the open list.
local function name_hand_on_watchers(q, prefix, channel, message)
  name_watchers_spaced(prefix .. 'named', channel, message, function()
    return hand_on_watchers(q, prefix)
  end)
end

local function hand_on(lock, counter, q, qt, prefix, claim, channel, message, queue_len)
  -- Times go to the server as text, formatted once: a Lua number handed to
  -- redis.call is printed with %.17g, about 1.2K instructions each (five of
  -- them were 5 % of a release's server work, callgrind).
  local window, twice = string.format('%d', claim), string.format('%d', claim * 2)
  local _, fence = next_fence(counter, window)
  -- The queue lapses with the grant unless a waiter takes it (its script
  -- gives the queue back its life): a name whose waiters all died leaves
  -- no key behind.
  redis.call('PEXPIRE', q, twice)
  redis.call('PEXPIRE', qt, twice)
  redis.call('SET', lock, 'rl:grant#' .. fence, 'PX', window)
  -- Who waits for messages, and whether any keeps a turn, in one call
  -- (each call here costs the handoff several microseconds on a server
  -- that was idle): a fair waiter with a turn is listed in both,
  -- so 0 and 2 say it all, and 1 (rare: a waiter waits for messages) is
  -- told apart by reading the turns.
  local listed = redis.call('EXISTS', prefix .. 'told', prefix .. 'turns')
  local has_turns = listed == 2
  if listed == 1 then
    has_turns = redis.call('EXISTS', prefix .. 'turns') == 1
  end
  local where = offer(q, qt, prefix, fence, twice, has_turns)
  if where == nil then
    return false
  end
  -- One waiter, the taker, names nobody (publish.lua
  -- name_watchers_spaced): the usual handoff neither reads the queue's
  -- members nor builds the tables to find that out (a ZRANGE in the
  -- release was its costliest call on a server that idled before it),
  -- nor makes the call. A head looked for (queue_head, with turns) may
  -- have dropped lapsed waiters from the queue counted before: the count
  -- only overstates it, and two or more read the queue itself.
  if not queue_len or queue_len >= 2 then
    name_hand_on_watchers(q, prefix, channel, message)
  end
  -- Nobody waits for messages: no told list (with turns alone listed,
  -- only the turns are).
  return where ~= 'kept' and (listed == 0 or (listed == 1 and has_turns))
end

-- A waiter took a hand-over: the queue lives on for the waiters still
-- blocked (hand_on cut its life to the claim).
local function queue_taken(q, qt, ttl, blocks)
  if ttl <= 0 then
    return
  end
  if blocks then
    -- Every blocking waiter's entry lives as long: nothing to compare.
    -- (As text: see hand_on.)
    local life = string.format('%d', ttl * 2)
    redis.call('PEXPIRE', q, life)
    redis.call('PEXPIRE', qt, life)
  else
    live_for(q, ttl * 2)
    live_for(qt, ttl * 2)
  end
end

-- The oldest live waiter that keeps its turn waiting for messages (see
-- offer) and arrived before me, if any.
local function elder_in_turn(q, qt, prefix, me)
  local turns = prefix .. 'turns'
  if redis.call('EXISTS', turns) == 0 then
    return nil
  end
  local now = now_ms()
  local best = tonumber(redis.call('ZSCORE', q, me)) or math.huge
  local elder = nil
  for _, t in ipairs(redis.call('ZRANGE', turns, 0, -1)) do
    local at = tonumber(redis.call('ZSCORE', q, t))
    local until_ms = tonumber(redis.call('ZSCORE', qt, t))
    if at and until_ms and until_ms > now and at < best then
      best, elder = at, t
    end
  end
  return elder
end

local function queue_take_open(lock, holder, q, qt, prefix, me, lease, ttl, claim, took, blocks, turn)
  if string.match(holder, '^[^#]*') ~= 'rl:grant' then
    return nil
  end
  local open = prefix .. 'open'
  local f = string.match(holder, '#(%d+)$')
  local kept = false
  if took then
    if took ~= f then
      return nil
    end
    -- A fair waiter's pop took the turn of an older waiter that keeps it
    -- waiting for messages (its place among the blocked was lost): the
    -- grant is kept for that one, with a whole claim window, and told
    -- (the caller publishes); the popper waits on.
    local elder = turn and elder_in_turn(q, qt, prefix, me)
    if elder then
      redis.call('SET', prefix .. 'kept', elder .. '#' .. f, 'PX', claim * 2)
      redis.call('PEXPIRE', lock, claim)
      return nil, true
    end
  elseif turn then
    -- A fair lock's waiter, blocking or not: kept for me, or on the open
    -- list while I am the oldest waiter (a blocked one pops it first; one
    -- ahead of me between round trips loses its place only once the
    -- claim window has passed).
    kept = f ~= nil and redis.call('GET', prefix .. 'kept') == me .. '#' .. f
    if not (kept or (redis.call('EXISTS', open) == 1 and queue_head(q, qt) == me)) then
      return nil
    end
  elseif not (redis.call('EXISTS', open) == 1 and redis.call('ZSCORE', q, me)) then
    return nil
  end
  local fence = tonumber(f) or 0
  local ms = lease
  if took then
    ms = math.min(tonumber(lease), claim * 2)
  end
  redis.call('SET', lock, holder_value(me, fence), 'PX', ms)
  queue_leave(q, qt, prefix, me, blocks)
  queue_taken(q, qt, ttl, blocks)
  if kept then
    redis.call('DEL', prefix .. 'kept')
  elseif not took then
    redis.call('DEL', open)
  end
  return fence
end

local function announce(channel, message, mode, told)
  if channel ~= '' and not (mode == 'queued' and told) then
    publish(channel, message)
  end
end

local function held_by(v, token, fence)
  if not v or token == '' then
    return nil
  end
  if string.match(v, '^[^#]*') == token then
    return 'held'
  end
  if fence and fence ~= '' and v == 'rl:grant#' .. fence then
    return 'popped'
  end
  return nil
end

local function queue_claim(lock, v, token, prefix, q, qt, ttl, lease)
  redis.call('SET', lock, token .. string.match(v, '#%d+$'), 'PX', lease)
  queue_leave(q, qt, prefix, token, true)
  queue_taken(q, qt, ttl, true)
  redis.call('DEL', prefix .. token)
end
