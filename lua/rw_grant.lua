-- Prelude (prepended to the scripts that name it in their "Uses" line; needs
-- fence.lua, publish.lua and queue.lua before it): the hand-over of a
-- read-write lock's write hold to its waiting writers, and what stops new
-- readers while a live writer waits.
-- KEYS     none of its own (callers pass the keys)
-- ARGV     none of its own
-- Returns  nothing; defines
--   rw_readers(readers, now) -> readers whose lease has not ended (the
--     others are reclaimed)
--   rw_open(writer, readers, counter, q, qt, rq, prefix, claim_ms, channel,
--     message, now, queue_len) -> whether the write hold was opened to the
--     waiting writers. `queue_len`: the queue's length as the caller read
--     it just before (ZCARD q), or nil to read it here.
--     Call it when the write hold is free, or is the hold a release ends
--     (the hand-over overwrites it). Unless a reader still
--     holds, and if a writer is queued (q, qt: queue.lua's queue of the
--     writers), opens the write hold to them as queue.lua hand_on opens a
--     lock: writers block in BLMOVE from prefix..'open' to their own list
--     prefix..token, and Redis serves the one blocked longest, whose
--     acquire script takes the hold. A writer that died has no connection
--     and is never served; a hand-over nobody took proves the queue dead
--     (rw_stale). Announces the hand-over (queue.lua announce) to writers
--     that wait for messages, and names the clients of readers waiting in
--     rq (the waiting readers) watchers (rw_name_readers): should the
--     writer that takes it freeze or die, the write hold lapses
--     unannounced, and that client's look tells the readers.
--   rw_writer_waits(writer, q, qt, prefix, claim_ms, now) -> true and how
--     long that is known when a live writer waits (new readers wait for
--     it, so a stream of readers cannot starve it, and look again when
--     that lapses), false when none does, or the milliseconds until that
--     is known.
--     A writer blocked in BLMOVE sends nothing, so its queue entry alone
--     says nothing of its life: the first reader to ask pushes a probe onto
--     the open list (prefix..'probe' lives claim_ms while it is in
--     flight, the open list four claims; readers come back 50 ms after
--     the flight); a live blocked writer pops it and its script marks the
--     writers alive for six claims (prefix..'alive', rw_alive; so does
--     every script a writer runs as it queues), and a probe
--     still there after the claim proves the queue dead: it is purged. A
--     writer that waits for messages (listed in prefix..'told' with its
--     deadline) is alive while its entry lives.
--   rw_alive(prefix, claim_ms): marks the queued writers alive (see above)
--   rw_name_readers(rq, prefix, channel, message, now): names the clients
--     of up to three waiting readers a hand-over's watchers (see rw_open)
--   rw_stale(writer, q, qt, prefix) -> whether the open list outlived what was put
--     on it (a hand-over or a probe nobody took); the queue is purged then
local function rw_readers(readers, now)
  redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
  return redis.call('ZCARD', readers)
end

local function rw_stale(writer, q, qt, prefix)
  local open = prefix .. 'open'
  if redis.call('EXISTS', open) == 0 or redis.call('EXISTS', prefix .. 'probe') == 1 then
    return false
  end
  local holder = redis.call('GET', writer)
  if holder and string.match(holder, '^[^#]*') == 'rl:grant' then
    return false -- a hand-over within its claim
  end
  redis.call('DEL', open, q, qt, prefix .. 'told', prefix .. 'alive')
  return true
end

-- Readers take no hand-over, so queue.lua names none of them; but a
-- writer that takes one and freezes or dies holds them back, and its
-- lapse opens nothing by itself: with the releaser gone they waited to
-- the end of the lease they had seen before the hand-over (up to 30 s).
-- So the clients of waiting readers are named too (publish.lua
-- tell_watchers), at most once in 50 ms (prefix..'rnamed'; their look,
-- 0.57 s later, is late enough for a hand-over made meanwhile), and a
-- look tells the readers. Three clients at most, of the latest entries:
-- a live reader moves its entry's end on at each retry, a dead one's
-- stays, and naming the earliest named a dead client until its entry
-- lapsed (up to 91 s; a review: 27.3 s). Not on a shard channel (a
-- sharded Cluster).
local function rw_name_readers(rq, prefix, channel, message, now)
  if channel == '' or string.find(channel, '{', 1, true)
      or not string.find(message, ':', 1, true) then
    return
  end
  -- Most hand-overs have no reader waiting: one call then.
  local last = redis.call('ZRANGE', rq, -6, -1, 'WITHSCORES')
  if #last == 0 or redis.call('EXISTS', prefix .. 'rnamed') == 1 then
    return
  end
  local ids, seen = {}, {}
  for i = #last - 1, 1, -2 do
    local id = tonumber(last[i + 1]) > now and string.match(last[i], 'rl:([^:]+):')
    if id and not seen[id] and #ids < 3 then
      seen[id] = true
      ids[#ids + 1] = id
    end
  end
  if #ids > 0 then
    redis.call('SET', prefix .. 'rnamed', '1', 'PX', '50')
    tell_watchers(channel, message, ids)
  end
end

local function rw_open(writer, readers, counter, q, qt, rq, prefix, claim, channel, message, now, queue_len)
  queue_len = queue_len or redis.call('ZCARD', q)
  if queue_len == 0 or rw_readers(readers, now) > 0 then
    return false
  end
  -- A probe left on the list is moot: the hand-over answers it.
  redis.call('DEL', prefix .. 'open', prefix .. 'probe')
  local told = hand_on(writer, counter, q, qt, prefix, claim, channel, message, queue_len)
  rw_name_readers(rq, prefix, channel, message, now)
  announce(channel, message, 'queued', told)
  return true
end

local function rw_writer_waits(writer, q, qt, prefix, claim, now)
  if redis.call('EXISTS', q) == 0 then
    return false
  end
  local alive = redis.call('PTTL', prefix .. 'alive')
  if alive > 0 then
    return true, alive
  end
  local told = redis.call('ZRANGE', prefix .. 'told', -1, -1, 'WITHSCORES')
  if told[2] and tonumber(told[2]) > now then
    return true, tonumber(told[2]) - now
  end
  if rw_stale(writer, q, qt, prefix) then
    return false
  end
  -- The reader comes back 50 ms after the probe's window, never on its
  -- last millisecond: a key lives through it (expired only when now >
  -- when), and a reader back on the dot found the probe still in flight,
  -- then, a window later, the open list gone with the evidence, and
  -- pushed again: a second lost for each tie (up to 6 s seen).
  local pending = redis.call('PTTL', prefix .. 'probe')
  if pending == -2 then
    local open = prefix .. 'open'
    local pushed = redis.pcall('RPUSH', open, 'probe')
    if type(pushed) == 'table' then
      return true, claim * 6 -- an ACL without RPUSH: writers wait for messages
    end
    -- The untaken probe outlives its window by three more, so that a
    -- reader back late (a loaded machine) still finds it. Times as text
    -- (queue.lua hand_on).
    redis.call('PEXPIRE', open, string.format('%d', claim * 4))
    redis.call('SET', prefix .. 'probe', '1', 'PX', string.format('%d', claim))
    pending = claim
  elseif pending < 0 then
    pending = claim -- no expiry: not written by redlease; look again later
  end
  return pending + 50
end

-- A writer shows it is alive (its script runs: it queues, looks without
-- blocking, or pops a probe): new readers wait for it that long.
local function rw_alive(prefix, claim)
  redis.call('SET', prefix .. 'alive', '1', 'PX', claim * 6)
end
