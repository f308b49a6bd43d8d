-- KEYS[1] the store's format version (absent: format 1); ARGV[1] the format to raise it to.
-- Never lowers it (a late or repeated raise is harmless: it only ever moves up). Returns the
-- format it was in, or an error reply LOWER naming the format the store is in.
local current = tonumber(redis.call('GET', KEYS[1]) or '1')
if current == nil or tonumber(ARGV[1]) < current then
  return redis.error_reply('LOWER the store is in format ' .. tostring(redis.call('GET', KEYS[1])))
end
redis.call('SET', KEYS[1], ARGV[1])
return current
