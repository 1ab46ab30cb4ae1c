-- Extend an exclusive lease if, and only if, the caller still owns it.
-- KEYS[1]  lock key ("<owner token>#<fence>")
-- ARGV[1]  owner token
-- ARGV[2]  new lease in milliseconds, counted from now
-- ARGV[3]  optional: 'exact' sets the lease to ARGV[2] even if that
--          shortens it (an explicit extend); without it (renewal) the lease
--          is never shortened, so a renewal that was sent before an
--          explicit extend but runs after it cannot undo the extension
-- Returns  1 extended, 0 not held by this token (the lease is lost).
--          Never errors: it runs in pipelined renewal batches, where one
--          error must not hide the other replies.
if redis.call('TYPE', KEYS[1]).ok == 'string' then
  local v = redis.call('GET', KEYS[1])
  if string.match(v, '^[^#]*') == ARGV[1] then
    local ms = tonumber(ARGV[2])
    if ARGV[3] == 'exact' or redis.call('PTTL', KEYS[1]) < ms then
      redis.call('PEXPIRE', KEYS[1], ms)
    end
    return 1
  end
end
return 0
