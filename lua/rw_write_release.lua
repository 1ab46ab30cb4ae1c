-- End a write hold if, and only if, the caller still owns it, and open it
-- to the queued writers (rw_grant.lua rw_open); otherwise publish, for
-- waiting readers.
-- Uses     clock.lua, fence.lua, publish.lua, queue.lua, rw_grant.lua
-- KEYS     as every read-write lock script (src/rwlock.rs Keys::scripted):
--          KEYS[1] writer key ("<owner token>#<fence>", or "rl:grant#<fence>"
--          while open to the queued writers), KEYS[2] readers (sorted
--          set: reader token -> expiry, server ms), KEYS[3] fencing counter
--          (fence.lua), KEYS[4] writer queue and KEYS[5] its deadlines
--          (queue.lua), KEYS[6] waiting readers (rw_read_acquire.lua),
--          KEYS[7] fence floor (fence.lua; always the last key)
-- ARGV[1]  writer token
-- ARGV[2]  wake-up channel
-- ARGV[3]  wake-up message
-- ARGV[4]  grant prefix (queue.lua, rw_grant.lua)
-- ARGV[5]  claim window of a hand-over, in milliseconds
-- ARGV[6]  'leave': a waiting writer gives up. Its queue entry goes first
--          (readers that waited for it are told once no writer is left),
--          and what its pop took without its script running is put back;
--          a write hold it took just as it gave up is then released like
--          a holder's; a hand-over made as it gave up, with no writer left
--          to take it, is withdrawn.
-- ARGV[7]  the hold's fence, or '': a write hold the writer's pop took,
--          not claimed yet, is its hold too (queue.lua held_by)
-- Returns  1 released, 2 released and opened to the queued writers (the
--          caller looks at the name again after the claim:
--          lua/rw_watch.lua), 0 not held by this token
local writer, readers, counter, q, qt, rq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local me, prefix, claim = ARGV[1], ARGV[4], tonumber(ARGV[5])
local open = prefix .. 'open'
local now = now_ms()
local function readers_wait()
  return redis.call('ZCOUNT', rq, '(' .. now, '+inf') > 0
end
-- The hold ends with nobody to hand it to. The counter goes with it: a
-- fresh one starts above it (fence.lua), and a name nobody holds leaves
-- no key, nor the writers' mark of life (a claim leaves it:
-- lua/lock_extend.lua). Writers still queued here wait behind a
-- downgrade's read: new readers probe them again, rather than this
-- release asking the queue a second time.
local function close()
  redis.call('DEL', writer, counter, prefix .. 'alive')
  if readers_wait() then
    publish(ARGV[2], ARGV[3])
  end
end
local v = redis.call('GET', writer)
local granted = v and v:sub(1, 9) == 'rl:grant#'
-- A holder's release (not a writer leaving) reads the writers' queue
-- here, and with nobody in it ends the hold before the queue's
-- definitions are made (src/protocol/scripts compose): the same calls in
-- the same order as below, where rw_open finds the queue empty.
local front_held, front_len
if ARGV[6] ~= 'leave' then
  front_held = held_by(v, me, ARGV[7])
  if not front_held then
    return 0
  end
  if front_held == 'held' then
    front_len = redis.call('ZCARD', q)
    if front_len == 0 then
      close()
      return 1
    end
  end
end
-- (the rest of the preludes)
if ARGV[6] == 'leave' then
  queue_leave(q, qt, prefix, me, false)
  local took = redis.pcall('LPOP', prefix .. me)
  redis.call('DEL', prefix .. me)
  if type(took) == 'string' and (took == 'probe' and not granted or v == 'rl:grant#' .. took) then
    -- Not ours to use any more: the next writer's (or, a probe, the
    -- question is asked again). Only the open grant's own fence goes
    -- back (as lua/lock_release.lua), and a probe only while no grant
    -- stands (a hand-over answers it, rw_grant.lua rw_open): while the
    -- key names a grant another writer's pop took, unclaimed, the open
    -- list must stay empty, or a writer waiting for messages takes that
    -- grant as still open (queue.lua queue_take_open; a review found two
    -- holders of one fence).
    redis.pcall('RPUSH', open, took)
    -- As long as each lives when first pushed (rw_grant.lua).
    redis.call('PEXPIRE', open, took == 'probe' and claim * 4 or claim * 2)
    return 0
  end
  if redis.call('EXISTS', q) == 0 then
    if granted then
      -- Opened as this writer gave up, and nobody is left to take it (a
      -- writer whose pop took it stays queued until its claim).
      redis.call('DEL', writer, open)
      v = nil
    end
    redis.call('DEL', prefix .. 'alive', prefix .. 'probe', open)
    if readers_wait() then
      publish(ARGV[2], ARGV[3])
    end
  end
end
-- As the part in front found it, unless a leaving writer's part above ran.
local held = front_held or held_by(v, me, ARGV[7])
if not held then
  return 0
end
if held == 'popped' then
  -- Released before its claim: it leaves the queue as a claim would
  -- (queue.lua queue_claim), before the queue is looked at.
  queue_leave(q, qt, prefix, me, true)
  redis.call('DEL', prefix .. me)
end
-- A hand-over overwrites the hold (no DEL first: each call here is on the
-- handoff's path); the hold goes below when there is none.
if rw_open(writer, readers, counter, q, qt, rq, prefix, claim, ARGV[2], ARGV[3], now, front_len) then
  return 2
end
close()
return 1
