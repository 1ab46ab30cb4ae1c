-- Count a latch down by one; the last count-down removes it and announces
-- the opening of its round to its live waiters. A latch without a count is
-- left alone (counting down a finished or never-set latch does nothing).
-- Uses     publish.lua
-- KEYS[1]  the latch: "<count>:<round>"
-- KEYS[2]  its waiters that wait for a message (latch_look.lua): the
--          opening is published while one of them is registered
-- KEYS[3]  its waiters blocked on the round's opening list
--          ("<latch>#<round>:open", in the latch's slot): one element is
--          pushed there while one of them is registered. Each blocked
--          connection pops it and puts it back (BLMOVE from the list to
--          itself), so one push wakes them all (Node::look_blocking); the
--          list lapses by itself (ARGV[3]), whether they woke or died
-- ARGV[1]  wake-up channel
-- ARGV[2]  wake-up message for the latch key; "#<round>" is appended, so
--          the message names this round's opening and nothing else
-- ARGV[3]  how long the opening list lives, in milliseconds
-- Returns  the round (a string) when this call opened the latch; otherwise
--          the count left (an integer), 0 when it had no count. Never an
--          array: turning a Lua table into a reply costs the server about
--          5K instructions (its checks for error, status, double, map and
--          set fields), before the blocked waiters' replies go out
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local n, round
if string.sub(v, 1, 2) == '1:' and #v > 2 then
  -- The last count-down, read without a pattern: its path is the one a
  -- blocked waiter's wake-up waits on, and the pattern matcher and
  -- `tonumber` are code a server idle until now runs cold (the latch's
  -- wake-up about 3 % slower with them: PERFORMANCE.md).
  n, round = 1, string.sub(v, 3)
else
  n, round = string.match(v, '^(%d+):(.+)$')
  n = tonumber(n)
end
if not n then
  return redis.error_reply('REDLEASE_FOREIGN the latch key holds a value redlease did not write')
end
if n <= 1 then
  -- Whether anybody registered, from what DEL removed: no clock, no count
  -- of the live (this runs before every blocked waiter's reply, and each
  -- distinct command is code a server idle until now runs cold). A
  -- registration lapses at twice its life, so an announcement may still be
  -- made for a waiter that died lately; its list lapses with ARGV[3].
  -- The latch and its blocked waiters' registration in one DEL: the latch
  -- is there (read above), so whatever else it removed is the registration
  -- (one call fewer before the blocked waiters' replies).
  local blocked = redis.call('DEL', KEYS[1], KEYS[3]) == 2
  local told = redis.call('DEL', KEYS[2]) == 1
  if blocked then
    -- Refused (an ACL without RPUSH: its waiters cannot block either, and
    -- wait for the message), the count-down still happens.
    local open = KEYS[1] .. '#' .. round .. ':open'
    if type(redis.pcall('RPUSH', open, 'open')) == 'number' then
      redis.call('PEXPIRE', open, ARGV[3])
    end
  end
  if told then
    publish(ARGV[1], ARGV[2] .. '#' .. round)
  end
  return round
end
redis.call('SET', KEYS[1], (n - 1) .. ':' .. round)
return n - 1
