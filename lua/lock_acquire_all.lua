-- Acquire several exclusive leases (a multi-lock's names on one server) for
-- one token, all or nothing: every name is granted, with its own fencing
-- token, only if every name is free with nobody waiting for it; otherwise
-- nothing is written. A try that never queues: a name held, open to its
-- waiters or with a live waiter ahead sends the caller to lock_acquire.lua,
-- name by name in canonical order, which waits, queues and hands on.
-- Uses     clock.lua, fence.lua
-- KEYS     per name, in canonical order: the lock key, its fencing counter,
--          its waiter queue and the queue's deadlines (lock_acquire.lua
--          KEYS[1..4]); then the fence floor (fence.lua; the last key)
-- ARGV[1]  owner token (starts with "rl:", contains no '#')
-- ARGV     then per name, in the same order: the lease in milliseconds
--          (> 0) and the grant prefix (queue.lua)
-- Returns  {fence, ...}  all granted, one fence per name in the order
--                        given, each lease set to its ARGV
--          0             not all free: nothing granted
-- Errors   REDLEASE_FOREIGN (a fencing counter or the floor is not a
--          positive integer below 2^53), before anything is written; a
--          refused write (READONLY, OOM) may come after some names were
--          granted, so on any error the caller releases them all
--          (lock_release.lua, token-checked).
local me = ARGV[1]
local n = (#KEYS - 1) / 4
-- Every name's lock, open list and queue in one call: any of them there
-- (held, open to its waiters, or somebody queued, maybe lapsed) sends the
-- caller the one-by-one way, which looks closer. Nothing is written yet.
local busy = {}
for i = 0, n - 1 do
  busy[3 * i + 1] = KEYS[1 + 4 * i]
  busy[3 * i + 2] = ARGV[3 + 2 * i] .. 'open'
  busy[3 * i + 3] = KEYS[3 + 4 * i]
end
if redis.call('EXISTS', unpack(busy)) > 0 then
  return 0
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
