-- Read-only view of a read-write lock.
-- Uses     clock.lua
-- KEYS[1]  writer key
-- KEYS[2]  readers (sorted set: token -> expiry, server ms)
-- ARGV     none
-- Returns  {writer held (0/1), readers whose lease has not ended}
local now = now_ms()
return {redis.call('EXISTS', KEYS[1]), redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')}
