-- Acquire an exclusive lease and draw a fencing token, atomically.
-- KEYS[1]  lock key: a string holding the owner token while held
-- KEYS[2]  fencing counter: an integer that only ever grows (never expires)
-- ARGV[1]  owner token (starts with "rl:")
-- ARGV[2]  lease in milliseconds (> 0)
-- Returns  {1, fence}  acquired; fence is the new counter value. Asking
--                      again with the same token (a retry after a lost
--                      reply) re-grants with the same fence.
--          {0, pttl}   held by another owner; pttl in ms (-1: no expiry)
-- Errors   WRONGTYPE (key is not a string), REDLEASE_FOREIGN (string not
--          written by redlease), or the counter's own error (it is rolled back).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' and fence.err then
    -- Scripts do not roll back: undo the SET so a bad counter leaves no lease.
    redis.call('DEL', KEYS[1])
    return redis.error_reply('REDLEASE_FOREIGN fencing counter is not an integer')
  end
  return {1, fence}
end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
if string.sub(holder, 1, 3) ~= 'rl:' then
  return redis.error_reply('REDLEASE_FOREIGN lock key holds a value not written by redlease')
end
return {0, redis.call('PTTL', KEYS[1])}
