-- KEYS[1] a shard stream; ARGV[1] the group; ARGV[2] earliest | latest | timestamp; ARGV[3]
-- the timestamp in ms; ARGV[4] 'dry' for a dry run (C1: nothing moves). Returns the group's
-- new last-delivered id (G3). Recreating the group at the new id drops its pending entries
-- (XGROUP SETID alone keeps them).
local id = '$'
if ARGV[2] == 'earliest' then
  id = '0-0'
elseif ARGV[2] == 'timestamp' then
  local first = redis.call('XRANGE', KEYS[1], ARGV[3], '+', 'COUNT', 1)
  if #first > 0 then
    local ms, seq = string.match(first[1][1], '^(%d+)-(%d+)$')
    if seq ~= '0' then
      id = ms .. '-' .. string.format('%.0f', tonumber(seq) - 1)
    elseif ms ~= '0' then
      id = string.format('%.0f', tonumber(ms) - 1) .. '-18446744073709551615'
    else
      id = '0-0'
    end
  end
end
if ARGV[4] == 'dry' then
  if id == '$' then
    local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
    id = '0-0'
    if #last > 0 then id = last[1][1] end
  end
  return id
end
redis.pcall('XGROUP', 'DESTROY', KEYS[1], ARGV[1])
redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[1], id, 'MKSTREAM')
for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local name, last
  for i = 1, #group, 2 do
    if group[i] == 'name' then name = group[i + 1] end
    if group[i] == 'last-delivered-id' then last = group[i + 1] end
  end
  if name == ARGV[1] then return last end
end
return redis.error_reply('consumer group ' .. ARGV[1] .. ' missing after its reset')
