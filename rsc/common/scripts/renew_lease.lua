-- KEYS[1] the coordinator lease; ARGV[1] our id; ARGV[2] the TTL in ms.
-- Returns 1 when renewed, 0 when the lease is not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
