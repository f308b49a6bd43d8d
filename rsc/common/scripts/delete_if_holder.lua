-- KEYS[1] the coordinator lease; ARGV[1] the holder seen (a dead local coordinator).
-- Returns 1 when it was deleted, 0 when someone else holds it now.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
