-- Store a short note about the lock's holder beside the lock (host, pid,
-- since when), for `inspect` and `redlease status`. Only the holder can,
-- and the note lives no longer than the lease does now.
-- Uses     queue.lua
-- KEYS[1]  lock key ("<token>#<fence>")
-- KEYS[2]  note key
-- ARGV[1]  the holder's token
-- ARGV[2]  the note
-- ARGV[3]  the holder's fence: a grant its pop took, not claimed yet, is
--          its hold too (queue.lua held_by)
-- Returns  1 stored, 0 not held by this token
local v = redis.call('GET', KEYS[1])
if not held_by(v, ARGV[1], ARGV[3]) then
  return 0
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl <= 0 then
  return 0
end
redis.call('SET', KEYS[2], ARGV[1] .. '\n' .. ARGV[2], 'PX', ttl)
return 1
