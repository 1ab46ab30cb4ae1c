-- Tell a primitive's waiters to look again, without changing anything (a
-- hold's lease was shortened: waiters that wait for messages, like
-- readers, would otherwise wait for the old end).
-- Uses     publish.lua
-- KEYS[1]  the primitive's key (routes the call to its server or slot)
-- ARGV[1]  wake-up channel
-- ARGV[2]  wake-up message
-- Returns  1
publish(ARGV[1], ARGV[2])
return 1
