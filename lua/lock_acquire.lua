-- Acquire an exclusive lease (plain or fair lock) and draw a fencing token,
-- atomically. A waiter queues; a release opens the name to its waiters
-- (queue.lua hand_on), and the oldest live blocked one takes it.
-- Uses     clock.lua, took.lua, fence.lua, publish.lua, queue.lua
-- KEYS[1]  lock key: a string "<owner token>#<fence>" while held, or
--          "rl:grant#<fence>" while open to the waiters (queue.lua)
-- KEYS[2]  fencing counter (fence.lua)
-- KEYS[3]  waiter queue (queue.lua)
-- KEYS[4]  waiter deadlines (queue.lua)
-- KEYS[5]  fence floor (fence.lua; always the last key)
-- ARGV[1]  owner token (starts with "rl:", contains no '#'); also the
--          waiter's queue entry
-- ARGV[2]  lease in milliseconds (> 0)
-- ARGV[3]  queue entry lifetime in milliseconds; 0 = do not queue (a
--          try_acquire never does)
-- ARGV[4]  grant prefix: prefix..'open' is the open list, prefix..token a
--          blocking waiter's own list, prefix..'told' the waiters that
--          wait for messages (queue.lua)
-- ARGV[5]  the usual claim window of a hand-over, in milliseconds
--          (queue.lua): what a pop's first lease and a grant kept for an
--          elder are measured by
-- ARGV[6]  wake-up channel, ARGV[7] wake-up message, ARGV[8] 'queued' or
--          '' (queue.lua announce): for a lock handed on from here
-- ARGV[9]  'block': this waiter blocks in BLMOVE from the open list to its
--          own list. Otherwise ('') it waits for release messages. A fair
--          lock's waiter says 'turn block' or 'turn': it takes a grant its
--          pop did not take only in its turn, and one that waits for
--          messages keeps its turn (its place among the blocked was lost:
--          queue.lua offer).
-- ARGV[10] claim window of a hand-over made here (the name found free with
--          a live waiter ahead), in milliseconds: ARGV[5], or longer right
--          after a Cluster slot moved (src/protocol/timing.rs
--          hand_over_claim)
-- ARGV[11] 'popped' (optional): this script runs right behind that pop: a
--          fence found on the waiter's own list is an open grant it took
-- Returns  fence (an integer): acquired, with the lease set to ARGV[2]
--          (taken by a pop: the lesser of that and twice ARGV[5]): the lock
--          was free with no live waiter ahead, or open and taken by this
--          waiter, or already held by this token (a retry after a lost
--          reply: a hold is counted once and keeps its fence)
--          ms (text): wait; ms = the holder's remaining lease (or ARGV[10]
--          for a hand-over made from here)
--          (Scalars, not a table: a table reply costs Redis about 5K
--          instructions; src/backend/answer.rs.)
-- Errors   WRONGTYPE (key is not a string), REDLEASE_FOREIGN (a string not
--          written by redlease, a holder without expiry, or a counter that
--          is not a positive integer).
local lock, counter, q, qt = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local me, lease, ttl, prefix = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local blocks = ARGV[9] == 'block' or ARGV[9] == 'turn block'
local turn = ARGV[9] == 'turn' or ARGV[9] == 'turn block'
local open = prefix .. 'open'
local mine = prefix .. me
-- What this waiter's pop (right before this script) took (took.lua).
local took = took_from_open(mine, ARGV[11] == 'popped')
if took == nil then
  return redis.error_reply(NOPERM_POP)
end
local holder = redis.call('GET', lock)
-- Free, nobody queued and no hand-over left open: the usual case, told in
-- one call (the queue's head read from an empty queue was a call of its
-- own, and the reply an empty table), and served before the queue's
-- definitions are made (src/protocol/scripts compose).
local busy = holder or redis.call('EXISTS', open, q) > 0
if not busy then
  local fence, text = next_fence(counter, lease)
  redis.call('SET', lock, me .. '#' .. text, 'PX', lease)
  return fence
end
-- (the rest of the preludes)
if holder then
  local owner = string.match(holder, '^[^#]*')
  if owner == me then
    redis.call('PEXPIRE', lock, lease)
    return tonumber(string.match(holder, '#(%d+)$')) or 0
  end
  -- Open to the waiters: ours if our pop took it (queue.lua).
  local fence, passed = queue_take_open(lock, holder, q, qt, prefix, me, lease, ttl, tonumber(ARGV[5]), took, blocks, turn)
  if fence then
    return fence
  end
  if passed then
    -- Kept for an older waiter in its turn: it waits for this message.
    announce(ARGV[6], ARGV[7], '', false)
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
    queue_join(q, qt, prefix, me, ttl, blocks, turn)
    if owner == 'rl:grant' and redis.call('EXISTS', open) == 1 then
      -- Queued while a hand-over waits on the open list (nobody was
      -- blocked to take it): this waiter may block before the older ones
      -- and take it, so they watch it too (queue.lua). Under contention
      -- a blocked waiter takes each grant at once: this is rare.
      name_hand_on_watchers(q, prefix, ARGV[6], ARGV[7])
    end
  end
  return string.format('%d', pttl)
end
-- Free, with somebody queued or a hand-over left open: one whose claim
-- window passed untaken goes (queue.lua), and the queue's head decides.
queue_untaken(q, qt, prefix)
local head = queue_head(q, qt)
if head == nil or head == me then
  local fence, text = next_fence(counter, lease)
  redis.call('SET', lock, me .. '#' .. text, 'PX', lease)
  if head then
    queue_leave(q, qt, prefix, me, blocks)
  end
  return fence
end
-- Free, yet a live waiter is ahead (the holder's lease ran out with nobody
-- to hand the lock on): open it to the waiters now, then wait.
local told = hand_on(lock, counter, q, qt, prefix, tonumber(ARGV[10]), ARGV[6], ARGV[7])
announce(ARGV[6], ARGV[7], ARGV[8], told)
if ttl > 0 then
  queue_join(q, qt, prefix, me, ttl, blocks, turn)
end
-- The claim window as the client sent it (whole milliseconds, digits).
return ARGV[10]
