-- Set a count-down latch's count, unless a count is already set.
-- KEYS[1]  the latch: "<count>:<round>" (a string)
-- ARGV[1]  the count (> 0)
-- ARGV[2]  this round's id (random): names the round's opening message
-- Returns  1 set, 0 a count was already set (the latch is in use)
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ARGV[2])
return 1
