-- KEYS[1] a shard stream, KEYS[2] its owner token for the group; ARGV[1] the memberId;
-- ARGV[2] the group; ARGV[3] an entry id; ARGV[4] the delivery count to record (P1).
-- Records a handler call before it runs: sets the pending entry's delivery count to ARGV[4]
-- (XCLAIM ... RETRYCOUNT ... JUSTID, nothing else changes). Returns 1 once recorded, 0 when
-- the entry is no longer pending (acked, or its body is gone), or -1 (NOT_OWNER) when the
-- token names another member: then nothing is recorded (D1).
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return -1
end
local claimed = redis.call('XCLAIM', KEYS[1], ARGV[2], ARGV[1], 0, ARGV[3],
                           'RETRYCOUNT', ARGV[4], 'JUSTID')
return #claimed
