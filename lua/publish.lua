-- Prelude (prepended to the scripts that name it in their "Uses" line):
-- wake-up messages that never fail the script that sends them.
-- KEYS     none of its own
-- ARGV     none of its own
-- Returns  nothing; defines
--   publish(channel, message): PUBLISH, unless channel is ''. A refusal
--     (an ACL without rights on the channel: Redis 7's default
--     `resetchannels`) is logged by the server and otherwise ignored: the
--     write before it has happened, so failing the script would report a
--     completed release as an error. Waiters in other clients then learn
--     at their next look instead.
local function publish(channel, message)
  if channel == '' then
    return
  end
  local sent = redis.pcall('PUBLISH', channel, message)
  if type(sent) == 'table' and sent.err then
    redis.log(redis.LOG_WARNING, 'redlease: wake-up not published on ' .. channel .. ': ' .. sent.err)
  end
end
