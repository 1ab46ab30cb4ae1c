-- Remove whatever holds a primitive, whoever owns it, and wake its waiters.
-- Uses     publish.lua
-- KEYS[1]  the primitive's key (lock string, rwlock hash, semaphore set)
-- KEYS[2..] further state keys of the primitive to remove with it
-- ARGV[1]  wake-up channel
-- ARGV[2]  wake-up message
-- Returns  1 if a holder was removed, 0 if nothing was held
local removed = redis.call('DEL', unpack(KEYS))
if removed > 0 then
  publish(ARGV[1], ARGV[2])
  return 1
end
return 0
