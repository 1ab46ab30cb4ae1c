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
--   name_watchers_spaced(named, channel, message, members_of): after a
--     hand-over (an open lock, write hold or semaphore offer), names its
--     watchers: the clients of members_of() (owner tokens
--     "rl:<client id>:...", or members that hold one), at most three, each
--     once (none unless two clients or more wait), each told on its own
--     channel "<channel>:<client id>" the message "@<client id>:<key>"
--     (message is the wake-up message "<client id>:<key>"); but not those
--     named in the last 50 ms (listed in the key named, ",<id>,<id>,",
--     which lapses 50 ms after its first naming). Each client told looks
--     at the name once the claim window has passed (src/wakeup/watch.rs),
--     so that a taker that froze, died or lost its release holds it no
--     longer than the claim, even when the releasing process has exited.
--     A channel of its own, so that no other client's subscriber reads
--     it. Nothing on a shard channel (a sharded Cluster: blocked waiters
--     join none).
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

-- The clients of members (at most three, each once) a hand-over names, or
-- nil when they are fewer than two or nothing can carry the naming.
local function watcher_ids(channel, message, members)
  if channel == '' or not string.find(message, ':', 1, true)
      or string.find(channel, '{', 1, true) then
    return nil
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
    return nil
  end
  return ids
end

-- Publishes the naming to each of ids.
local function tell_watchers(channel, message, ids)
  local colon = string.find(message, ':', 1, true)
  local key = string.sub(message, colon)
  for _, id in ipairs(ids) do
    -- Refused by an ACL that names the client channel alone: the
    -- releaser's look and the waiters' own remain. Not logged: it would
    -- be once per hand-over.
    redis.pcall('PUBLISH', channel .. ':' .. id, '@' .. id .. key)
  end
end

-- Watchers named less than WATCHED_MS ago look late enough for this
-- hand-over too: named at t, they look at t + 0.57 s at the earliest
-- (src/wakeup/watch.rs), when a grant or offer made by t + 0.07 s and left
-- unclaimed has lapsed, and a hold or permits a frozen taker's script took
-- (a first lease of twice the claim) are looked at again at their end. So
-- within WATCHED_MS of a naming only watchers not named yet are named
-- (the key `named` lists those named, and keeps the first naming's
-- expiry). Naming nobody then, a waiter that queued after the naming was
-- left to its own look (up to 5 s) when the watchers named were the
-- takers themselves, one gone and one frozen (a review: 4.97 s, 1.02 s
-- before the spacing). Under contention (a hand-over every few hundred
-- microseconds, the same clients in line) each client is named a few
-- times a second, not at every hand-over (a review counted 1.0-1.2
-- namings a turn when waiters that queued named them each time).
local WATCHED_MS = 50

local function name_watchers_spaced(named, channel, message, members_of)
  if channel == '' then
    return
  end
  local ids = watcher_ids(channel, message, members_of())
  if not ids then
    return
  end
  local before = redis.call('GET', named)
  local fresh = {}
  for _, id in ipairs(ids) do
    if not (before and string.find(before, ',' .. id .. ',', 1, true)) then
      fresh[#fresh + 1] = id
    end
  end
  if #fresh == 0 then
    return
  end
  tell_watchers(channel, message, fresh)
  local left = before and redis.call('PTTL', named) or -2
  if left > 0 then
    redis.call('SET', named, before .. table.concat(fresh, ',') .. ',', 'PX', left)
  else
    redis.call('SET', named, ',' .. table.concat(fresh, ',') .. ',', 'PX', WATCHED_MS)
  end
end
