-- Acquire an exclusive lease and draw a fencing token, atomically.
-- KEYS[1]  lock key: a string "<owner token>#<fence>" while held (the fence
--          is kept so that a retried grant returns the same one)
-- KEYS[2]  fencing counter: an integer that only ever grows
-- ARGV[1]  owner token (starts with "rl:", contains no '#')
-- ARGV[2]  lease in milliseconds (> 0)
-- Returns  {1, fence}  acquired; fence is the new counter value. Asking
--                      again with the same token (a retry after a lost
--                      reply) re-grants the same hold with the same fence
--                      and draws nothing: a hold is counted once.
--          {0, pttl}   held by another owner; pttl in ms (-1: no expiry)
-- Errors   WRONGTYPE (key is not a string), REDLEASE_FOREIGN (string not
--          written by redlease, a holder without expiry, or a counter that
--          is not a positive integer).
local holder = redis.call('GET', KEYS[1])
if not holder then
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' and fence.err or fence < 1 then
    return redis.error_reply('REDLEASE_FOREIGN fencing counter is not a positive integer')
  end
  redis.call('SET', KEYS[1], ARGV[1] .. '#' .. fence, 'PX', ARGV[2])
  return {1, fence}
end
if string.match(holder, '^[^#]*') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(string.match(holder, '#(%d+)$')) or 0}
end
if string.sub(holder, 1, 3) ~= 'rl:' then
  return redis.error_reply('REDLEASE_FOREIGN lock key holds a value not written by redlease')
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -1 then
  -- redlease always writes a lease; a holder that never expires would make
  -- every waiter wait forever.
  return redis.error_reply('REDLEASE_FOREIGN lock key has no expiry (redlease always sets one)')
end
return {0, pttl}
