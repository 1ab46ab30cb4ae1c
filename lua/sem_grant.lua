-- Prelude (prepended to the scripts that name it in their "Uses" line; needs
-- publish.lua before it): the direct grant of a semaphore's free permits to
-- its waiters, as queue.lua does for a lock.
-- KEYS     none of its own (callers pass the keys)
-- ARGV     none of its own
-- Returns  nothing; defines
--   sem_now() -> the server's clock in milliseconds
--   sem_hand_on(keys, n, fair, prefix, claim, now, channel, message):
--     keys = {permits, count, queue, deadlines} as in sem_acquire.lua; n
--     the permit count. Walks the live waiters (fair: in arrival order,
--     stopping at the first that does not fit; otherwise in order of
--     their entries' deadlines, skipping those that do not fit) and,
--     while free permits suffice, grants each one its permits: its member
--     joins the permit set for claim_ms, its entry goes, and a wake-up is
--     pushed onto the list prefix..member, on which it blocks (BLPOP) with
--     its acquire script pipelined behind, which finds its member and sets
--     its lease. A waiter that is gone never runs that script: its claim
--     lapses and the permits are free again. A waiter that waits for
--     messages (its deadline marked by half a millisecond) is not granted
--     but told, with its permits kept free for it in this walk. At most
--     100 waiters are looked at; beyond them, a message tells the rest.
local function sem_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function sem_hand_on(keys, n, fair, prefix, claim, now, channel, message)
  local permits, count, q, qt = keys[1], keys[2], keys[3], keys[4]
  local order = qt
  if fair then
    order = q
  end
  local waiters = redis.call('ZRANGE', order, 0, 99)
  if #waiters == 0 then
    return
  end
  redis.call('ZREMRANGEBYSCORE', permits, '-inf', now)
  local used = 0
  for _, m in ipairs(redis.call('ZRANGE', permits, 0, -1)) do
    used = used + (tonumber(string.match(m, '^(%d+):')) or 1)
  end
  local told, granted = #waiters == 100, false
  for _, w in ipairs(waiters) do
    local deadline = tonumber(redis.call('ZSCORE', qt, w) or '0')
    local k = tonumber(string.match(w, '^(%d+):')) or 1
    if deadline <= now then
      -- Lapsed: it stopped renewing its entry (died, or was cut off).
      redis.call('ZREM', qt, w)
      if fair then
        redis.call('ZREM', q, w)
      end
    elseif used + k > n then
      if fair then
        break
      end
    elseif deadline % 1 ~= 0 then
      told = true
      used = used + k
      if fair then
        break
      end
    else
      redis.call('ZADD', permits, now + claim, w)
      used = used + k
      granted = true
      redis.call('ZREM', qt, w)
      if fair then
        redis.call('ZREM', q, w)
      end
      local list = prefix .. w
      -- A wake-up left by an earlier grant is harmless (see queue.lua).
      local pushed = redis.pcall('RPUSH', list, '1')
      if type(pushed) == 'table' then
        told = true -- refused (an ACL without RPUSH): it looks again when told
      else
        redis.call('PEXPIRE', list, claim)
      end
    end
  end
  if granted then
    -- The set and the count live as long as the longest permit.
    local last = redis.call('ZRANGE', permits, -1, -1, 'WITHSCORES')
    local ttl = tonumber(last[2]) - now
    redis.call('PEXPIRE', permits, ttl)
    redis.call('SET', count, string.format('%d', n), 'PX', ttl)
  end
  if told then
    publish(channel, message)
  end
end
