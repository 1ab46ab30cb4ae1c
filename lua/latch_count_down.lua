-- Count a latch down by one; the last count-down removes it, pushes one
-- wake-up per live blocking waiter of its round onto the round's wake-up
-- list (each waiter's BLPOP takes one, and its own check, pipelined
-- behind, finds the round over: no message, no other thread), and
-- announces the opening for the waiters that wait for messages. A latch
-- without a count is left alone (counting down a finished or never-set
-- latch does nothing).
-- Uses     publish.lua
-- KEYS[1]  the latch: "<count>:<round>"
-- KEYS[2]  prefix of the round's keys: .."<round>:w" its blocking waiters
--          (sorted set, see latch_wait.lua), .."<round>:open" its wake-ups
-- ARGV[1]  wake-up channel
-- ARGV[2]  wake-up message for the latch key; "#<round>" is appended, so
--          the message names this round's opening and nothing else
-- ARGV[3]  how long wake-ups wait for their waiters (ms)
-- Returns  {count left, round}: {0, round} = this call opened the latch,
--          {0, ""} = it had no count
local v = redis.call('GET', KEYS[1])
if not v then
  return {0, ''}
end
local n, round = string.match(v, '^(%d+):(.+)$')
n = tonumber(n)
if not n then
  return redis.error_reply('REDLEASE_FOREIGN the latch key holds a value redlease did not write')
end
if n <= 1 then
  redis.call('DEL', KEYS[1])
  local waiters, list = KEYS[2] .. round .. ':w', KEYS[2] .. round .. ':open'
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local live = redis.call('ZCOUNT', waiters, '(' .. now, '+inf')
  redis.call('DEL', waiters)
  for _ = 1, live do
    -- An ACL without RPUSH: those waiters learn it at their next check.
    if type(redis.pcall('RPUSH', list, '1')) == 'table' then
      break
    end
  end
  if live > 0 then
    redis.pcall('PEXPIRE', list, ARGV[3])
  end
  publish(ARGV[1], ARGV[2] .. '#' .. round)
  return {0, round}
end
redis.call('SET', KEYS[1], (n - 1) .. ':' .. round)
return {n - 1, round}
