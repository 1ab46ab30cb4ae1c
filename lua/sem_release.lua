-- Return permits to a semaphore (only their holder's member can), and offer
-- what is free to its waiters (sem_grant.lua sem_offer).
-- Uses     clock.lua, publish.lua, sem_grant.lua
-- KEYS[1]  permits (sorted set)
-- KEYS[2]  permit count (deleted with the set when the last permit goes)
-- KEYS[3]  fair mode's queue (sorted set, see sem_acquire.lua)
-- KEYS[4]  waiters' deadlines (sorted set, see sem_acquire.lua)
-- ARGV[1]  member "<k>:<token>"
-- ARGV[2]  wake-up channel
-- ARGV[3]  wake-up message
-- ARGV[4]  grant prefix (sem_grant.lua)
-- ARGV[5]  claim window of a hand-over (an offer), in milliseconds:
--          longer right after a Cluster slot move (src/protocol/
--          timing.rs hand_over_claim)
-- ARGV[6]  the caller's permit count, used when no count is stored
-- ARGV[7]  '1' fair mode, '0' otherwise
-- ARGV[8]  'leave': a waiter gives up. Its entries go, first in line or
--          not, and an offer its pop took without its script running is
--          put back for the next; permits it took just as it gave up are
--          then returned like a release.
-- Returns  1 released, 2 released and offered to the waiters (the caller
--          looks at the name again after the claim: lua/sem_watch.lua), 0
--          the permits had expired or been removed (lost, or, leaving,
--          never granted)

-- The member's permits back: returns the server's clock, the permit count
-- and when the member's permits would have lapsed (nil: it held none).
local function give_back()
  local now = now_ms()
  local n = tonumber(redis.call('GET', KEYS[2])) or tonumber(ARGV[6])
  local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[1], ARGV[1])
  if redis.call('ZCARD', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[1], KEYS[2])
  end
  return now, n, expiry
end

-- The release's reply: 1 (2 when it offered what it freed) if the
-- member's permits were still live when they went back, else 0.
local function released(now, expiry, offered)
  if expiry and tonumber(expiry) > now then
    return offered and 2 or 1
  end
  return 0
end

-- A holder's release with nobody queued, no offer owed and nobody told
-- by messages (one call for the three): there is nobody to offer to
-- (sem_grant.lua sem_offer would find the same and return), and the run
-- ends before the waiters' definitions are made (src/protocol/scripts
-- compose). With somebody there, sem_offer reads the keys again: one call
-- more for a release that offers (0.7 us), kept rather than a hint into
-- sem_offer that its purge of owed waiters would have to invalidate.
if ARGV[8] ~= 'leave'
    and redis.call('EXISTS', ARGV[4] .. 'owed', KEYS[4], ARGV[4] .. 'told') == 0 then
  local now, _, expiry = give_back()
  return released(now, expiry, false)
end
-- (the rest of the preludes)

local keys = {KEYS[1], KEYS[2], KEYS[3], KEYS[4]}
local me, prefix, claim = ARGV[1], ARGV[4], tonumber(ARGV[5])
local fair = ARGV[7] == '1'
local leaving = ARGV[8] == 'leave'
if leaving then
  local owed = redis.call('ZSCORE', prefix .. 'owed', me)
  sem_leave(keys, prefix, me, fair)
  if owed and redis.call('EXISTS', prefix .. 'owed') == 0 then
    -- The offer left to it is nobody's now: made again below.
    sem_close(prefix)
  end
  if redis.call('GET', prefix .. 'head') == me then
    redis.call('DEL', prefix .. 'head')
  end
  local took = redis.pcall('LPOP', prefix .. me)
  if type(took) == 'string' then
    sem_pass(prefix, claim, tonumber(took) or 0)
  end
  redis.call('DEL', prefix .. me)
end
local now, n, expiry = give_back()
local offered = false
-- A waiter that left may have been the one first in line.
if expiry or leaving then
  offered = sem_offer(keys, n, fair, prefix, claim, now, ARGV[2], ARGV[3], true)
end
if leaving and redis.call('EXISTS', KEYS[4]) == 0 then
  -- The last waiter left: an offer or a place first in line is nobody's.
  -- (Those told of offers keep their list: after a purge, waiters still
  -- alive are on it and nowhere else; each leaves it as it ends.)
  redis.call('DEL', prefix .. 'open', prefix .. 'offer', prefix .. 'head', KEYS[3])
end
return released(now, expiry, offered)
