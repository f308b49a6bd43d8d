-- KEYS[1] the meta hash, KEYS[2..] owner tokens; ARGV[1] our coordinator epoch; ARGV[2] the
-- epoch field; ARGV[3] the write-sequence field; ARGV[4] this write's sequence number;
-- ARGV[5] how many hash fields follow; then field, value pairs ('' deletes); then one value
-- per owner token ('' deletes). Returns 1, or an error reply FENCED (a newer coordinator
-- wrote) or STALE (a later write of ours landed first, D4).
local current = redis.call('HGET', KEYS[1], ARGV[2])
if current and tonumber(current) > tonumber(ARGV[1]) then
  return redis.error_reply('FENCED coordinator epoch ' .. current .. ' owns ' .. KEYS[1])
end
if current and tonumber(current) == tonumber(ARGV[1]) then
  local seq = redis.call('HGET', KEYS[1], ARGV[3])
  if seq and tonumber(seq) >= tonumber(ARGV[4]) then
    return redis.error_reply('STALE write ' .. ARGV[4] .. ' of ' .. KEYS[1] .. ' arrived after write ' .. seq)
  end
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[1], ARGV[3], ARGV[4])
local fields = tonumber(ARGV[5])
for i = 6, 5 + 2 * fields, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[1], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
for k = 2, #KEYS do
  local value = ARGV[5 + 2 * fields + k - 1]
  if value == '' then
    redis.call('DEL', KEYS[k])
  else
    redis.call('SET', KEYS[k], value)
  end
end
return 1
