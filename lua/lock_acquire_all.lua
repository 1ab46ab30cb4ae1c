-- Acquire several exclusive leases (a multi-lock's names on one server) for
-- one token, all or nothing: every name is granted, with its own fencing
-- token, only if every name is free with nobody waiting for it; otherwise
-- nothing is written. A try that never queues. A name held by a holder
-- says so (a try has its answer); a name open to its waiters or with
-- anybody queued (who may have lapsed) sends the caller to
-- lock_acquire.lua, name by name in canonical order, which looks closer,
-- waits, queues and hands on.
-- Uses     clock.lua, fence.lua
-- KEYS     per name, in canonical order: the lock key, its fencing counter,
--          its waiter queue and the queue's deadlines (lock_acquire.lua
--          KEYS[1..4]); then the fence floor (fence.lua; the last key)
-- ARGV[1]  owner token (starts with "rl:", contains no '#')
-- ARGV     then per name, in the same order: the lease in milliseconds
--          (> 0) and the grant prefix (queue.lua)
-- Returns  {fence, ...}  all granted, one fence per name in the order
--                        given, each lease set to its ARGV
--          0             a name is held by a holder: nothing granted
--          -1            no name is held, but one is open to its waiters
--                        or has a queue: nothing granted
-- Errors   REDLEASE_FOREIGN (a fencing counter or the floor is not a
--          positive integer below 2^53), before anything is written; a
--          refused write (READONLY, OOM) may come after some names were
--          granted, so on any error the caller releases them all
--          (lock_release.lua, token-checked).
local me = ARGV[1]
local n = (#KEYS - 1) / 4
-- Every name's lock, open list and queue, in as few calls as Lua can
-- unpack (a few thousand arguments): any of them there sends the caller
-- the one-by-one way, or, where a holder holds a name, answers a try.
-- Nothing is written yet.
local CHUNK = 500
for from = 0, n - 1, CHUNK do
  local busy = {}
  for i = from, math.min(from + CHUNK, n) - 1 do
    busy[#busy + 1] = KEYS[1 + 4 * i]
    busy[#busy + 1] = ARGV[3 + 2 * i] .. 'open'
    busy[#busy + 1] = KEYS[3 + 4 * i]
  end
  if redis.call('EXISTS', unpack(busy)) > 0 then
    for i = 0, n - 1 do
      -- Held by a holder of redlease's (the one-by-one way reports
      -- anything else, as lock_acquire.lua does).
      local lock = KEYS[1 + 4 * i]
      local holder = redis.call('GET', lock)
      if holder and string.sub(holder, 1, 3) == 'rl:'
          and string.sub(holder, 1, 9) ~= 'rl:grant#' and redis.call('PTTL', lock) > 0 then
        return 0
      end
    end
    return -1
  end
end
local counters, leases = {}, {}
for i = 0, n - 1 do
  counters[i + 1] = KEYS[2 + 4 * i]
  leases[i + 1] = ARGV[2 + 2 * i]
end
local fences = next_fences(counters, leases)
for i = 0, n - 1 do
  redis.call('SET', KEYS[1 + 4 * i], holder_value(me, fences[i + 1]), 'PX', leases[i + 1])
end
return fences
