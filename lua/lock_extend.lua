-- Extend an exclusive lease if, and only if, the caller still owns it; for
-- a lock (or a read-write lock's write hold) whose waiters block, also
-- claim a grant the caller's pop took (queue.lua held_by): the new
-- holder's first renewal, off the handoff.
-- Uses     queue.lua
-- KEYS[1]  lock key, or writer key ("<owner token>#<fence>")
-- KEYS[2]  waiter (writer) queue, KEYS[3] its deadlines (queue.lua; with
--          ARGV[2])
-- ARGV[1]  owner token
-- ARGV[2]  grant prefix (queue.lua), or '': nothing to claim (a hold no
--          pop can take: a try's, a lock on Redlock)
-- ARGV[3]  the blocked waiters' queue entry lifetime in milliseconds
--          (queue.lua queue_taken; with ARGV[2])
-- ARGV[4]  the hold's fence, or '': a grant the owner's pop took, not
--          claimed yet, is claimed now (with ARGV[2])
-- ARGV[5]  new lease in milliseconds, counted from now (always the last
--          argument but for ARGV[6])
-- ARGV[6]  optional: 'exact' sets the lease to ARGV[5] even if that
--          shortens it (an explicit extend); without it (renewal) the lease
--          is never shortened, so a renewal that was sent before an
--          explicit extend but runs after it cannot undo the extension
-- Returns  1 extended (or claimed), 0 not held by this token (the lease is
--          lost). Never errors on a key of another type: it runs in
--          pipelined renewal batches, where one error must not hide the
--          other replies.
if redis.call('TYPE', KEYS[1]).ok == 'string' then
  local v = redis.call('GET', KEYS[1])
  local ms = tonumber(ARGV[5])
  local held = held_by(v, ARGV[1], ARGV[2] ~= '' and ARGV[4])
  if held == 'held' then
    if ARGV[6] == 'exact' or redis.call('PTTL', KEYS[1]) < ms then
      redis.call('PEXPIRE', KEYS[1], ms)
    end
    return 1
  end
  if held == 'popped' then
    queue_claim(KEYS[1], v, ARGV[1], ARGV[2], KEYS[2], KEYS[3], tonumber(ARGV[3]), ms)
    -- A note the holder wrote before its claim lived as long as the grant
    -- then did (lua/lock_note.lua): it lives as long as the lease now.
    local note = KEYS[1] .. ':note'
    local n = redis.call('GET', note)
    if n and string.sub(n, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' then
      redis.call('PEXPIRE', note, ms)
    end
    return 1
  end
end
return 0
