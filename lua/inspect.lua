-- Read-only snapshot of everything stored under one name.
-- Uses     clock.lua
-- KEYS[1]  lock key            KEYS[2]  fencing counter
-- KEYS[3]  lock waiters queue  KEYS[4]  rwlock writer key
-- KEYS[5]  rwlock readers      KEYS[6]  semaphore permits
-- KEYS[7]  semaphore waiters   KEYS[8]  the lock holder's note
-- KEYS[9]  semaphore count     KEYS[10] rwlock writers queue
-- ARGV[1]  the lock's grant prefix (queue.lua)
-- Returns  {lock holder token or '', lock pttl, fence or 0, lock waiters,
--           writer token or '', writer pttl, live readers, live permits
--           in use, semaphore waiters, the holder's note or '', the
--           semaphore's permit count or 0, waiting writers}
-- Only string/zset values written by redlease are read; anything else is
-- reported as absent rather than failing the whole snapshot.
local now = now_ms()
local function str(k)
  if redis.call('TYPE', k).ok == 'string' then
    return redis.call('GET', k)
  end
  return false
end
local function zcount_live(k)
  if redis.call('TYPE', k).ok == 'zset' then
    return redis.call('ZCOUNT', k, '(' .. now, '+inf')
  end
  return 0
end
local function zcard(k)
  if redis.call('TYPE', k).ok == 'zset' then
    return redis.call('ZCARD', k)
  end
  return 0
end
-- Lock and writer values are "<token>#<fence>": report the token.
local function owner(v) return v and string.match(v, '^[^#]*') end
local holder = owner(str(KEYS[1])) or ''
local lock_waiters = zcard(KEYS[3])
-- A lock handed over ("rl:grant#<fence>") is held by the waiter whose pop
-- took that fence, until it claims the lock (queue.lua held_by): its own
-- list holds the fence meanwhile, and it is still queued. Nobody took it
-- yet: nobody holds it. (Where an ACL refuses LINDEX, a queued waiter's
-- own list is enough to name it.)
if holder == 'rl:grant' then
  holder = ''
  local f = string.match(str(KEYS[1]), '#(%d+)$')
  if lock_waiters > 0 and f then
    for _, t in ipairs(redis.call('ZRANGE', KEYS[3], 0, 63)) do
      local mine = ARGV[1] .. t
      if redis.call('TYPE', mine).ok == 'list' then
        local head = redis.pcall('LINDEX', mine, 0)
        if type(head) == 'table' or head == f then
          holder = t
          lock_waiters = lock_waiters - 1
          break
        end
      end
    end
  end
end
local fence = tonumber(str(KEYS[2]) or '0') or 0
local writer = owner(str(KEYS[4])) or ''
local used = 0
if redis.call('TYPE', KEYS[6]).ok == 'zset' then
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], '(' .. now, '+inf')) do
    used = used + (tonumber(string.match(m, '^(%d+):')) or 1)
  end
end
-- A note counts only if the current holder wrote it.
local note = ''
local n = str(KEYS[8])
if n and holder ~= '' then
  local tok, text = string.match(n, '^([^\n]*)\n(.*)$')
  if tok == holder then note = text end
end
local count = 0
if used > 0 then
  count = tonumber(str(KEYS[9]) or '0') or 0
end
return {holder, redis.call('PTTL', KEYS[1]), fence, lock_waiters, writer,
        redis.call('PTTL', KEYS[4]), zcount_live(KEYS[5]), used, zcard(KEYS[7]), note,
        count, zcard(KEYS[10])}
