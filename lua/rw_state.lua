-- Read-only view of a read-write lock.
-- KEYS[1]  writer key
-- KEYS[2]  readers (sorted set: token -> expiry, server ms)
-- ARGV     none
-- Returns  {writer held (0/1), readers whose lease has not ended}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {redis.call('EXISTS', KEYS[1]), redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')}
