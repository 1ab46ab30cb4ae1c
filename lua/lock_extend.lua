-- Extend an exclusive lease if, and only if, the caller still owns it.
-- KEYS[1]  lock key ("<owner token>#<fence>")
-- ARGV[1]  owner token
-- ARGV[2]  new lease in milliseconds, counted from now
-- Returns  1 extended, 0 not held by this token (the lease is lost).
--          Never errors: it runs in pipelined renewal batches, where one
--          error must not hide the other replies.
if redis.call('TYPE', KEYS[1]).ok == 'string' then
  local v = redis.call('GET', KEYS[1])
  if string.match(v, '^[^#]*') == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
  end
end
return 0
