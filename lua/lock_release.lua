-- Release an exclusive lease if, and only if, the caller still owns it.
-- KEYS[1]  lock key
-- ARGV[1]  owner token
-- ARGV[2]  wake-up channel
-- ARGV[3]  wake-up message (publisher id and key)
-- Returns  1 released (waiters are notified), 0 not held by this token
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0
