-- Set a count-down latch's count, unless a count is already set.
-- KEYS[1]  the latch: "<count>:<round>" (a string)
-- ARGV[1]  the count (> 0)
-- ARGV[2]  this round's id (random): names the round's opening message
-- Returns  1 set (also when this same round is already set: a repeat of
--          a call whose reply was lost), 0 another count is already set
local v = redis.call('GET', KEYS[1])
if v then
  if string.match(v, '^%d+:(.+)$') == ARGV[2] then
    return 1
  end
  return 0
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ARGV[2])
return 1
