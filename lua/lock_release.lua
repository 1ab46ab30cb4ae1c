-- End an exclusive lease if, and only if, the caller still owns it, and
-- open the name to its live waiters, if any (queue.lua hand_on). Several
-- names on one server may be released in one run (a multi-lock): their
-- KEYS[1..4] and ARGV[1..10] repeat, one set per name, in that order, and
-- the fence floor stays the last key.
-- Uses     clock.lua, fence.lua, publish.lua, queue.lua
-- KEYS[1]  lock key ("<owner token>#<fence>")
-- KEYS[2]  fencing counter (fence.lua)
-- KEYS[3]  waiter queue, KEYS[4] its deadlines (queue.lua)
-- KEYS[5]  fence floor (fence.lua; always the last key)
-- ARGV[1]  owner token (with ARGV[9] 'leave': a waiter's token)
-- ARGV[2]  wake-up channel ("" = publish nothing)
-- ARGV[3]  wake-up message
-- ARGV[4]  grant prefix (queue.lua)
-- ARGV[5]  claim window of a hand-over, in milliseconds
-- ARGV[6]  "force": end the lease whoever holds it
-- ARGV[7]  "keep": leave the fencing counter to lapse by itself (Redlock:
--          masters keep agreeing on it); otherwise it is removed with the
--          last hold, since a fresh one starts above it (fence.lua)
-- ARGV[8]  'queued': every waiter of the name is in the queue, so publish
--          only for waiters that wait for messages (queue.lua announce);
--          otherwise always publish
-- ARGV[9]  'leave': a waiter gives up. Its queue entry is withdrawn
--          first, and an open grant its pop took without its script
--          running, or one kept for it, is offered to the next waiter
--          (queue.lua offer); a grant it took just as it gave up is then
--          handed on like a release; a name opened as it gave up, with
--          nobody left in the queue, is closed again. A holder never has either (taking the
--          lock takes it off the queue), so a release skips that work:
--          every call here is on the handoff's critical path.
-- ARGV[10] the hold's fence, or '': a grant the owner's pop took, not
--          claimed yet, is its hold too (queue.lua held_by)
-- Returns  1 released, 2 released and opened to the waiters (the caller
--          looks at the name again after the claim: lua/lock_watch.lua),
--          0 not held by this token; for several names, an array of
--          these, one per name in the order given, where a name whose
--          release raised an error has that error (the others still run)

-- One name, released by its holder (not a waiter leaving): the lock's
-- value and the queue's length are read here, before the queue's
-- definitions are made, and the usual release (nobody queued) is done
-- with them: a run that returns here never makes them (src/protocol/scripts
-- compose). With somebody queued, the hand-over follows the next split
-- line, before release() is made; a popped grant's release goes on in
-- release() from the value read. Each makes the same calls in the same
-- order as release() alone would.

-- Whether the hold `v` may be released by `token` (forced: by anyone),
-- and how it holds it (queue.lua held_by).
local function releasable(v, token, fence, force)
  local held = held_by(v, token, fence)
  if not v or (force ~= 'force' and not held) then
    return false
  end
  return true, held
end

-- A release with nobody queued: the name's keys go, the holder's note
-- (lock_note.lua) with them, so a name nobody holds or waits for leaves
-- no key; where every waiter queues (`queued`), nobody waits to be told.
local function close(lock, counter, prefix, keep, channel, message, queued)
  if keep ~= 'keep' then
    redis.call('DEL', lock, prefix .. 'open', lock .. ':note', counter)
  else
    redis.call('DEL', lock, prefix .. 'open', lock .. ':note')
  end
  announce(channel, message, queued, true)
end

local front_v, front_len
if #KEYS == 5 and ARGV[9] ~= 'leave' then
  front_v = redis.call('GET', KEYS[1])
  local ok, front_held = releasable(front_v, ARGV[1], ARGV[10], ARGV[6])
  if not ok then
    return 0
  end
  -- A grant popped and not claimed leaves the queue first (below), and
  -- the queue is read after that.
  if front_held ~= 'popped' then
    front_len = redis.call('ZCARD', KEYS[3])
    if front_len == 0 then
      close(KEYS[1], KEYS[2], ARGV[4], ARGV[7], ARGV[2], ARGV[3], ARGV[8])
      return 1
    end
  end
end
-- (the rest of the preludes)

-- The same release with somebody queued: what release() below ends with,
-- without making it, nor checking the owner again (each function made or
-- called costs about a microsecond on a server that idled before the
-- release, which is when a waiter is blocked for it).
if front_len then
  local told = hand_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[4], tonumber(ARGV[5]), ARGV[2], ARGV[3], front_len)
  announce(ARGV[2], ARGV[3], ARGV[8], told)
  return 2
end
-- (the rest of the preludes)

-- One name's release: its keys from KEYS[k], its arguments from ARGV[a];
-- `v`: the lock's value, if read already (nil: not read).
local function release(k, a, v)
  local lock, counter, q, qt = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  local token, channel, message, prefix, claim = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local force, keep, queued, leave, fence = ARGV[a + 5], ARGV[a + 6], ARGV[a + 7], ARGV[a + 8], ARGV[a + 9]
  local took = false
  if leave == 'leave' then
    -- The oldest waiter leaving: a hand-over left on the open list for it
    -- (it waited for messages and could take it, queue.lua) is the next
    -- one's to take now, and that one must hear of it.
    local oldest = redis.call('ZRANGE', q, 0, 0)[1] == token
    queue_leave(q, qt, prefix, token, false)
    took = redis.pcall('LPOP', prefix .. token)
    if type(took) == 'table' then
      -- An ACL without LPOP: the pop was refused too.
      took = false
    end
    redis.call('DEL', prefix .. token)
    -- A grant kept for this waiter (it waited for messages, queue.lua
    -- offer) is its to pass on, as one its pop took.
    local kept = redis.call('GET', prefix .. 'kept')
    if kept and string.match(kept, '^[^#]*') == token then
      redis.call('DEL', prefix .. 'kept')
      took = string.match(kept, '#(%d+)$')
    elseif not took and oldest then
      -- Only while the name is open (else the list lapses as it is). By
      -- LPOP, which the README's ACL line grants; refused, nothing is
      -- passed on, and the claim window's look does it.
      local v = redis.call('GET', lock)
      if v and string.match(v, '^[^#]*') == 'rl:grant' then
        local open = prefix .. 'open'
        local f = redis.pcall('LPOP', open)
        if type(f) == 'string' then
          if v == 'rl:grant#' .. f then
            took = f
          else
            -- Not this grant's (the open list holds its fence alone):
            -- back, with its life.
            redis.pcall('RPUSH', open, f)
            redis.call('PEXPIRE', open, tonumber(claim) * 2)
          end
        end
      end
    end
  end
  -- Read here unless the part in front read it (a holder's release,
  -- where nothing above has run).
  v = v or redis.call('GET', lock)
  local ours = v and took and v == 'rl:grant#' .. took
  if leave == 'leave' and v and string.match(v, '^[^#]*') == 'rl:grant'
      and redis.call('EXISTS', q) == 0
      and (ours or redis.call('EXISTS', prefix .. 'open') == 1) then
    -- Opened as this waiter gave up, and nobody is left in the queue to take
    -- it: withdraw it, rather than hold the name up for the claim window.
    if keep ~= 'keep' then
      redis.call('DEL', lock, prefix .. 'open', counter)
    else
      redis.call('DEL', lock, prefix .. 'open')
    end
    return 0
  end
  if ours then
    -- Still open, with its fence taken off the list by our pop (or kept
    -- for us): offer it to the next waiter (only that fence: any other
    -- would let its popper believe it holds a grant another may claim),
    -- with a whole claim window: one kept for it and let lapse would cost
    -- it its place (queue.lua queue_untaken).
    redis.call('PEXPIRE', lock, claim)
    if offer(q, qt, prefix, took, tonumber(claim) * 2) == 'kept' then
      announce(channel, message, '', false)
    end
    return 0
  end
  local ok, held = releasable(v, token, fence, force)
  if not ok then
    return 0
  end
  if held == 'popped' then
    -- Released before its claim: it leaves the queue as a claim would
    -- (queue.lua queue_claim), before the queue is looked at.
    queue_leave(q, qt, prefix, token, true)
    redis.call('DEL', prefix .. token)
  end
  -- Anyone queued: the blocked among them take it, and one that is not (it
  -- died, or waits for messages) costs at most the claim window (queue.lua).
  -- No clock and no deadlines here: this runs before the next holder's reply.
  -- Counted: the hand-over reads the queue's members only to name
  -- watchers, which one waiter does not need (queue.lua).
  local queue_len = redis.call('ZCARD', q)
  if queue_len == 0 then
    close(lock, counter, prefix, keep, channel, message, queued)
    return 1
  end
  -- The hand-over overwrites the lock key: no DEL first.
  local told = hand_on(lock, counter, q, qt, prefix, tonumber(claim), channel, message, queue_len)
  announce(channel, message, queued, told)
  return 2
end
if #KEYS == 5 then
  return release(1, 1, front_v)
end
-- Each name on its own: one name's error (a foreign value) must not keep
-- the others from their release, nor hide what happened to them.
local codes = {}
for i = 0, (#KEYS - 1) / 4 - 1 do
  local ok, code = pcall(release, 1 + 4 * i, 1 + 10 * i)
  if ok then
    codes[i + 1] = code
  elseif type(code) == 'table' then
    codes[i + 1] = code
  else
    codes[i + 1] = {err = tostring(code)}
  end
end
return codes
