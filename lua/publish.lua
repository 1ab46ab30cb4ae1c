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
--   name_watchers(channel, message, members): after a hand-over (an open
--     lock, write hold or semaphore offer), tells the clients of members
--     (owner tokens "rl:<client id>:...", or members that hold one), at
--     most three, each once (none unless two clients or more wait), on
--     its own channel "<channel>:<client id>"
--     the message "@<client id>:<key>" (message is the wake-up message
--     "<client id>:<key>"). Each client told looks at the name once the
--     claim window has passed (src/wakeup/watch.rs), so that a taker that
--     froze, died or lost its release holds it no longer than the claim,
--     even when the releasing process has exited. Returns whether it told
--     anyone. A channel of its own,
--     so that no other client's subscriber reads it. Nothing on a shard
--     channel (a sharded Cluster: blocked waiters join none).
--   name_watchers_spaced(named, channel, message, members_of): names the
--     watchers members_of() lists (name_watchers), unless watchers of the
--     same name were named in the last 50 ms (the key named, which lapses
--     by then); members_of runs only when they are named
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

local function name_watchers(channel, message, members)
  local colon = string.find(message, ':', 1, true)
  if channel == '' or not colon or string.find(channel, '{', 1, true) then
    return
  end
  -- Clients, not members: three threads of one frozen process would
  -- otherwise take every place.
  local ids, seen = {}, {}
  for _, m in ipairs(members) do
    local id = string.match(m, 'rl:([^:]+):')
    if id and not seen[id] then
      seen[id] = true
      ids[#ids + 1] = id
      if #ids == 3 then
        break
      end
    end
  end
  -- One client alone is the taker's: nobody else waits to be let in (a
  -- waiter that comes while the hand-over is open names the watchers
  -- then, lua/lock_acquire.lua).
  if #ids < 2 then
    return false
  end
  local key = string.sub(message, colon)
  for _, id in ipairs(ids) do
    -- Refused by an ACL that names the client channel alone: the
    -- releaser's look and the waiters' own remain. Not logged: it would
    -- be once per hand-over.
    redis.pcall('PUBLISH', channel .. ':' .. id, '@' .. id .. key)
  end
  return true
end

-- Watchers named less than WATCHED_MS ago look late enough for this
-- hand-over too: named at t, they look at t + 0.57 s at the earliest
-- (src/wakeup/watch.rs), when a grant or offer made by t + 0.07 s and left
-- unclaimed has lapsed, and a hold or permits a frozen taker's script took
-- (a first lease of twice the claim) are looked at again at their end.
-- Under contention (a hand-over every few hundred microseconds, each next
-- waiter queueing while one waits) this names watchers a few times a
-- second, not at every hand-over (a review counted 1.0-1.2 namings a turn
-- when waiters that queued named them each time).
local WATCHED_MS = '50'

local function name_watchers_spaced(named, channel, message, members_of)
  if channel ~= '' and redis.call('EXISTS', named) == 0
      and name_watchers(channel, message, members_of()) then
    redis.call('SET', named, '1', 'PX', WATCHED_MS)
  end
end
