-- Take a read hold of a read-write lock.
-- Uses     clock.lua, fence.lua, publish.lua, queue.lua, rw_grant.lua
-- KEYS     as every read-write lock script (src/rwlock.rs Keys::scripted):
--          KEYS[1] writer key ("<owner token>#<fence>", or "rl:grant#<fence>"
--          while open to the queued writers), KEYS[2] readers (sorted
--          set: reader token -> expiry, server ms), KEYS[3] fencing counter
--          (fence.lua), KEYS[4] writer queue and KEYS[5] its deadlines
--          (queue.lua), KEYS[6] waiting readers (rw_read_acquire.lua),
--          KEYS[7] fence floor (fence.lua; always the last key)
--          (while a live writer waits, new readers wait, so a stream of
--          readers cannot starve it: rw_grant.lua rw_writer_waits)
-- ARGV[1]  reader token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  the caller's own write token if this thread holds the write lock
--          (a downgrade), else ''
-- ARGV[4]  waiting entry lifetime without a retry, ms; 0 = do not register
--          (a try never does)
-- ARGV[5]  grant prefix (queue.lua, rw_grant.lua)
-- ARGV[6]  claim window of a hand-over or a probe, in milliseconds
-- ARGV[7]  wake-up channel, ARGV[8] wake-up message: for a hand-over made
--          from here
-- ARGV[9]  the fence of that write hold, or '': one its pop took, not
--          claimed yet, is the caller's too (queue.lua held_by)
-- Returns  0 (an integer: no fence) acquired (again when the same token
--          asks again: a retry after a lost reply re-grants, it never adds
--          a second hold);
--          ms (text): wait (ms = what blocks us, -1 unknown)
-- Errors   WRONGTYPE / REDLEASE_FOREIGN when the keys hold foreign data.
local writer, readers, counter, q, qt, rq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local prefix, claim = ARGV[5], tonumber(ARGV[6])
local now = now_ms()
local holder = redis.call('GET', writer)
if holder and string.sub(holder, 1, 3) ~= 'rl:' then
  return redis.error_reply('REDLEASE_FOREIGN writer key holds a value not written by redlease')
end
-- redlease always writes a lease: a writer that never expires would make
-- every waiter wait forever.
if holder and redis.call('PTTL', writer) == -1 then
  return redis.error_reply('REDLEASE_FOREIGN writer key has no expiry (redlease always sets one)')
end
-- The first reader of a free name, in one call: nobody reads, no writer is
-- queued and no reader waits. The checks below could then find nothing
-- (lapsed readers, a waiting writer, readers to tell), and this reader's
-- lease is the set's whole life.
if not holder and redis.call('EXISTS', readers, q, rq) == 0 then
  redis.call('ZADD', readers, now + tonumber(ARGV[2]), ARGV[1])
  redis.call('PEXPIRE', readers, ARGV[2])
  return 0
end
-- (the rest of the preludes)
local held = rw_readers(readers, now)
local top = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
if top[2] and tonumber(top[2]) == math.huge then
  return redis.error_reply('REDLEASE_FOREIGN a reader never expires (score +inf; redlease always sets one)')
end
local expiry = now + tonumber(ARGV[2])
-- Wait for `ms` (what blocks us), registered as a waiting reader.
local function wait(ms)
  local ttl = tonumber(ARGV[4])
  if ttl > 0 then
    redis.call('ZADD', rq, now + ttl, ARGV[1])
    if redis.call('PTTL', rq) < ttl * 2 then
      redis.call('PEXPIRE', rq, ttl * 2)
    end
  end
  return string.format('%d', ms)
end
local function enter()
  if redis.call('ZREM', rq, ARGV[1]) == 1 and redis.call('ZCOUNT', rq, '(' .. now, '+inf') > 0 then
    -- It waited, and so do others: what held it back (a writer found
    -- dead) held them back too.
    publish(ARGV[7], ARGV[8])
  end
  redis.call('ZADD', readers, expiry, ARGV[1])
  local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', readers, tonumber(last[2]) - now)
  return 0
end
if redis.call('ZSCORE', readers, ARGV[1]) then
  return enter()
end
if holder and not held_by(holder, ARGV[3], ARGV[9]) then
  return wait(redis.call('PTTL', writer))
end
-- (ZCARD: a writer queue holding foreign data is an error, not a writer.)
if ARGV[3] == '' and redis.call('ZCARD', q) > 0 then
  if held == 0 then
    -- Free, with writers queued: theirs first. A hand-over is its own
    -- proof of life: nobody taking it proves the queue dead.
    if not rw_stale(writer, q, qt, prefix)
        and rw_open(writer, readers, counter, q, qt, rq, prefix, claim, ARGV[7], ARGV[8], now) then
      return wait(claim)
    end
  else
    local waits, known = rw_writer_waits(writer, q, qt, prefix, claim, now)
    if waits == true then
      -- It takes the write hold when the readers leave, and its release
      -- tells us. Should it die first, the first of the waiting readers
      -- learns when its proof of life lapses, and tells the others as it
      -- goes in (below): one reader looks, not all.
      local first = redis.call('ZRANGE', readers, 0, 0, 'WITHSCORES')
      local ms = tonumber(first[2]) - now
      local lead = redis.call('ZRANGE', rq, 0, 0)[1]
      if lead == nil or lead == ARGV[1] then
        ms = math.min(ms, known + 50)
      end
      return wait(ms)
    elseif waits then
      return wait(waits)
    end
  end
end
return enter()
