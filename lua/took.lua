-- Prelude (prepended to the scripts that name it in their "Uses" line):
-- what a waiter's BLMOVE, pipelined right before the script, took from its
-- name's open list onto the waiter's own list. One reading for every
-- primitive that hands on through an open list (locks, writers, permits).
-- KEYS     none of its own (the waiter's list is the script's grant prefix
--          followed by its token, in the script's slot)
-- ARGV     none of its own
-- Returns  nothing; defines
--   took_from_open(mine, popped) -> what the pop took (false: nothing, or
--     no pop ran: `popped` false on a first look), or nil when it cannot be
--     read: an ACL that allows BLMOVE but not LPOP. That value is dropped
--     (a hand-over lapses; an offer is the caller's to pass on), and the
--     caller answers redis.error_reply(NOPERM_POP), after which the client
--     waits for messages instead.
local NOPERM_POP = 'NOPERM redlease needs LPOP with BLMOVE (see the README ACL line)'

local function took_from_open(mine, popped)
  if not popped then
    return false
  end
  local took = redis.pcall('LPOP', mine)
  if type(took) ~= 'table' then
    return took
  end
  -- LPOP refused. Nothing taken (the pop was refused too): carry on.
  if redis.call('EXISTS', mine) == 0 then
    return false
  end
  redis.call('DEL', mine)
  return nil
end
