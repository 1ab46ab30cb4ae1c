-- Count a latch down by one; the last count-down removes it and announces
-- the opening of its round. A latch without a count is left alone
-- (counting down a finished or never-set latch does nothing).
-- Uses     clock.lua, publish.lua
-- KEYS[1]  the latch: "<count>:<round>"
-- KEYS[2]  its waiters (latch_look.lua): the opening is announced only
--          while one of them is live, and removes them
-- ARGV[1]  wake-up channel
-- ARGV[2]  wake-up message for the latch key; "#<round>" is appended, so
--          the message names this round's opening and nothing else
-- ARGV[3]  how long the round's opening list lives, in milliseconds: the
--          announcement to waiters blocked in a pop of it
--          ("<latch>#<round>:open", in the latch's slot). Every connection
--          blocked there takes the one element in turn (each pop puts it
--          back: BLMOVE from the list to itself), and the first waiter to
--          wake removes the list behind its pop (latch.rs); the list
--          lapses by itself when nobody was blocked (they all died)
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
  local now = now_ms()
  local waiting = redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf') > 0
  redis.call('DEL', KEYS[1], KEYS[2])
  if waiting then
    -- Refused (an ACL without RPUSH: its waiters cannot block either, and
    -- wait for the message), the count-down still happens.
    local open = KEYS[1] .. '#' .. round .. ':open'
    if type(redis.pcall('RPUSH', open, 'open')) == 'number' then
      redis.call('PEXPIRE', open, ARGV[3])
    end
    publish(ARGV[1], ARGV[2] .. '#' .. round)
  end
  return {0, round}
end
redis.call('SET', KEYS[1], (n - 1) .. ':' .. round)
return {n - 1, round}
