-- Prelude (prepended to the scripts that name it in their "Uses" line):
-- wake-up messages that never fail the script that sends them.
-- KEYS     none of its own
-- ARGV     none of its own
-- Returns  nothing; defines
--   publish(channel, message): PUBLISH, unless channel is ''; SPUBLISH
--     for a shard channel (Redis Cluster 7+: the client's channel followed
--     by the name's hash tag, so it lies in the script's slot and only
--     that slot's master carries it; a key prefix has no '{'). A refusal
--     (an ACL without rights on the channel: Redis 7's default
--     `resetchannels`) is logged by the server and otherwise ignored: the
--     write before it has happened, so failing the script would report a
--     completed release as an error. Waiters in other clients then learn
--     at their next look instead.
local function publish(channel, message)
  if channel == '' then
    return
  end
  local command = string.find(channel, '{', 1, true) and 'SPUBLISH' or 'PUBLISH'
  local sent = redis.pcall(command, channel, message)
  if type(sent) == 'table' and sent.err then
    redis.log(redis.LOG_WARNING, 'redlease: wake-up not published on ' .. channel .. ': ' .. sent.err)
  end
end
