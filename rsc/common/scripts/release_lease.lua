-- KEYS[1] the coordinator lease, KEYS[2] the release marker; ARGV[1] our id; ARGV[2] how
-- long the marker stays (ms). Returns 1 when released, 0 when the lease is not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  return redis.call('DEL', KEYS[1])
end
return 0
