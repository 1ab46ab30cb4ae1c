-- Take the write hold of a read-write lock. A writer queues (queue.lua);
-- the last reader's release, or a writer's, opens the write hold to the
-- queued writers (rw_grant.lua rw_open), and the one blocked longest takes
-- it.
-- Uses     clock.lua, took.lua, fence.lua, publish.lua, queue.lua, rw_grant.lua
-- KEYS     as every read-write lock script (src/rwlock.rs Keys::scripted):
--          KEYS[1] writer key ("<owner token>#<fence>", or "rl:grant#<fence>"
--          while open to the queued writers), KEYS[2] readers (sorted
--          set: reader token -> expiry, server ms), KEYS[3] fencing counter
--          (fence.lua), KEYS[4] writer queue and KEYS[5] its deadlines
--          (queue.lua), KEYS[6] waiting readers (rw_read_acquire.lua),
--          KEYS[7] fence floor (fence.lua; always the last key)
-- ARGV[1]  writer token (starts with "rl:", contains no '#')
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  queue entry lifetime in milliseconds; 0 = do not queue (a try
--          never does: it would hold readers back)
-- ARGV[4]  grant prefix (queue.lua, rw_grant.lua)
-- ARGV[5]  claim window of a hand-over, in milliseconds
-- ARGV[6]  wake-up channel, ARGV[7] wake-up message: for a hand-over made
--          from here, to writers that wait for messages, and to name the
--          older writers as watchers when this one queues while a
--          hand-over waits on the open list (queue.lua
--          name_hand_on_watchers)
-- ARGV[8]  'block': this writer blocks in BLMOVE from the open list to its
--          own list. Otherwise it waits for release messages.
-- ARGV[9]  'popped' (optional): this script runs right behind that pop: a
--          fence found on the writer's own list is an open grant it took,
--          'probe' a reader asking whether a writer is alive (rw_grant.lua)
-- Returns  fence (an integer): acquired (taken by a pop: for the lesser of
--          ARGV[2] and twice the claim, which the client raises at once;
--          again, with the same fence, when the same token asks again);
--          ms (text): wait: ms until the writer's lease or the first reader's
--          lease ends (at most five claims for a queued writer: when its
--          process's first look is due), or the claim of a hand-over made
--          here (-1 unknown)
-- Errors   WRONGTYPE, REDLEASE_FOREIGN (a value not written by redlease,
--          a holder or reader that never expires)
local writer, readers, counter, q, qt = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local me, lease, ttl, prefix = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local claim = tonumber(ARGV[5])
local blocks = ARGV[8] == 'block'
local open = prefix .. 'open'
local mine = prefix .. me
-- What this writer's pop (right before this script) took (took.lua).
local took = took_from_open(mine, ARGV[9] == 'popped')
if took == nil then
  return redis.error_reply(NOPERM_POP)
end
if took == 'probe' then
  -- A reader asked whether a writer waits: this one does.
  rw_alive(prefix, claim)
  redis.call('DEL', prefix .. 'probe')
  took = false
end
local holder = redis.call('GET', writer)
if holder and string.sub(holder, 1, 3) ~= 'rl:' then
  return redis.error_reply('REDLEASE_FOREIGN writer key holds a value not written by redlease')
end
-- The usual free case in one call: nobody reads, no writer is queued and no
-- hand-over or probe was left open. None of the checks below can then
-- find anything (they read the readers, clear a stale open list and read
-- the queue's head), nor is the clock needed; and it is served before the
-- definitions only they call are made (src/protocol/scripts compose).
if not holder and redis.call('EXISTS', readers, q, open) == 0 then
  local fence, text = next_fence(counter, lease)
  redis.call('SET', writer, me .. '#' .. text, 'PX', lease)
  return fence
end
-- (the rest of the preludes)
if holder then
  local owner = string.match(holder, '^[^#]*')
  if owner == me then
    redis.call('PEXPIRE', writer, lease)
    return tonumber(string.match(holder, '#(%d+)$')) or 0
  end
  -- Open to the writers: ours if our pop took it (queue.lua).
  local fence = queue_take_open(writer, holder, q, qt, prefix, me, lease, ttl, claim, took, blocks, false)
  if fence then
    if redis.call('EXISTS', q) == 0 then
      redis.call('DEL', prefix .. 'alive') -- no writer waits now
    end
    return fence
  end
  local pttl = redis.call('PTTL', writer)
  if pttl == -1 then
    return redis.error_reply('REDLEASE_FOREIGN writer key has no expiry (redlease always sets one)')
  end
  if ttl > 0 then
    queue_join(q, qt, prefix, me, ttl, blocks)
    rw_alive(prefix, claim)
    if owner == 'rl:grant' and redis.call('EXISTS', open) == 1 then
      -- Queued while a hand-over waits on the open list (nobody was
      -- blocked to take it): this writer may block before the older ones
      -- and take it, so they watch it too (as lua/lock_acquire.lua).
      name_hand_on_watchers(q, prefix, ARGV[6], ARGV[7])
    end
  end
  return string.format('%d', pttl)
end
local now = now_ms()
local held = rw_readers(readers, now)
local top = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
if top[2] and tonumber(top[2]) == math.huge then
  return redis.error_reply('REDLEASE_FOREIGN a reader never expires (score +inf; redlease always sets one)')
end
-- A hand-over or a probe nobody took: the queue's writers are gone.
rw_stale(writer, q, qt, prefix)
if held > 0 then
  if ttl > 0 then
    queue_join(q, qt, prefix, me, ttl, blocks)
    rw_alive(prefix, claim)
  end
  local first = redis.call('ZRANGE', readers, 0, 0, 'WITHSCORES')
  local wait = tonumber(first[2]) - now
  if ttl > 0 then
    -- Its process's first look (lua/rw_watch.lua) comes before the mark
    -- lapses, to keep it up while readers wait behind this writer.
    wait = math.min(wait, claim * 5)
  end
  return string.format('%d', wait)
end
local head = queue_head(q, qt)
if head == nil or head == me then
  local fence, text = next_fence(counter, lease)
  redis.call('SET', writer, me .. '#' .. text, 'PX', lease)
  if head then
    queue_leave(q, qt, prefix, me, blocks)
    if redis.call('EXISTS', q) == 0 then
      redis.call('DEL', prefix .. 'alive') -- no writer waits now
    end
  end
  return fence
end
-- Free, yet a live writer is ahead (the last holder's lease ran out with
-- nobody to hand the lock on): open it to the writers now, then wait.
if ttl > 0 then
  queue_join(q, qt, prefix, me, ttl, blocks)
end
rw_open(writer, readers, counter, q, qt, KEYS[6], prefix, claim, ARGV[6], ARGV[7], now)
return string.format('%d', claim)
