-- Leave a latch round's blocking waiters (a waiter that gave up or whose
-- reply was late), so that the opening pushes no wake-up for it.
-- KEYS[1]  the round's blocking waiters (sorted set of tokens)
-- ARGV[1]  the waiter's token
-- Returns  1 if it was there, 0 otherwise
return redis.call('ZREM', KEYS[1], ARGV[1])
