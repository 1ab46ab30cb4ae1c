-- Release an exclusive lease if, and only if, the caller still owns it.
-- KEYS[1]  lock key ("<owner token>#<fence>", or a plain token: intents)
-- ARGV[1]  owner token
-- ARGV[2]  wake-up channel
-- ARGV[3]  wake-up message (publisher id and key)
-- Returns  1 released (waiters are notified), 0 not held by this token
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^[^#]*') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0
