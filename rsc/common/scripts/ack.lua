-- KEYS[1] a shard stream, KEYS[2] its owner token for the group; ARGV[1] the memberId;
-- ARGV[2] the group; ARGV[3] '1' to ack with XACKDEL, '0' with XACK; ARGV[4..] entry ids.
-- Returns how many entries were acked, or -1 (NOT_OWNER) when the token names another
-- member: then nothing is acked (D1).
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return -1
end
if ARGV[3] == '1' then
  local result = redis.call('XACKDEL', KEYS[1], ARGV[2], 'ACKED', 'IDS', #ARGV - 3,
                            unpack(ARGV, 4))
  local acked = 0
  for _, code in ipairs(result) do
    if code ~= -1 then acked = acked + 1 end
  end
  return acked
end
return redis.call('XACK', KEYS[1], ARGV[2], unpack(ARGV, 4))
