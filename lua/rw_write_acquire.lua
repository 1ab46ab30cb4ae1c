-- Take the write hold of a read-write lock.
-- Uses     fence.lua
-- KEYS[1]  writer key (string "<owner token>#<fence>", PX lease)
-- KEYS[2]  readers (sorted set: reader token -> expiry, server ms)
-- KEYS[3]  writer intent (string, waiting writer's token, PX)
-- KEYS[4]  fencing counter (fence.lua)
-- KEYS[5]  fence floor (fence.lua; always the last key)
-- ARGV[1]  writer token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  intent lifetime in milliseconds (renewed at every retry, so a dead
--          writer's intent lapses and readers go on); '0' for a try, which
--          never queues: it leaves no intent to hold readers back
-- ARGV[4]  grant list prefix (the writer's token follows): a release hands
--          the write lock to a waiting writer that blocks there
--          (rw_write_release.lua, rw_read_release.lua)
-- ARGV[5]  'block': this writer blocks on its grant list, and its intent
--          says so ("<token>#b"); otherwise the intent is the bare token
--          and the writer waits for release messages
-- Returns  {1, fence} acquired (again, with the same fence, when the same
--          token asks again); {0, ms} wait: ms until the writer's lease or
--          the first reader's lease ends (-1 unknown)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local writer = redis.call('GET', KEYS[1])
if writer and string.sub(writer, 1, 3) ~= 'rl:' then
  return redis.error_reply('REDLEASE_FOREIGN writer key holds a value not written by redlease')
end
-- redlease always writes a lease and an intent lifetime: a writer or an
-- intent that never expires would make every waiter wait forever.
if writer and redis.call('PTTL', KEYS[1]) == -1 then
  return redis.error_reply('REDLEASE_FOREIGN writer key has no expiry (redlease always sets one)')
end
if redis.call('EXISTS', KEYS[3]) == 1 and redis.call('PTTL', KEYS[3]) == -1 then
  return redis.error_reply('REDLEASE_FOREIGN writer intent has no expiry (redlease always sets one)')
end
if writer and string.match(writer, '^[^#]*') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  -- A grant made while we were not blocked leaves its wake-up behind.
  redis.call('DEL', ARGV[4] .. ARGV[1])
  return {1, tonumber(string.match(writer, '#(%d+)$')) or 0}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local top = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if top[2] and tonumber(top[2]) == math.huge then
  return redis.error_reply('REDLEASE_FOREIGN a reader never expires (score +inf; redlease always sets one)')
end
local readers = redis.call('ZCARD', KEYS[2])
if writer or readers > 0 then
  local intent = ARGV[3] ~= '0' and redis.call('GET', KEYS[3])
  if ARGV[3] ~= '0' and (not intent or string.match(intent, '^[^#]*') == ARGV[1]) then
    local mark = ''
    if ARGV[5] == 'block' then
      mark = '#b'
    end
    redis.call('SET', KEYS[3], ARGV[1] .. mark, 'PX', ARGV[3])
  end
  if writer then
    return {0, redis.call('PTTL', KEYS[1])}
  end
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {0, tonumber(first[2]) - now}
end
local fence = next_fence(KEYS[4], ARGV[2])
redis.call('SET', KEYS[1], holder_value(ARGV[1], fence), 'PX', ARGV[2])
local intent = redis.call('GET', KEYS[3])
if intent and string.match(intent, '^[^#]*') == ARGV[1] then
  redis.call('DEL', KEYS[3])
end
return {1, fence}
