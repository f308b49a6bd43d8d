-- KEYS[1] a shard stream; ARGV[1..] the groups. Returns this node's TIME in ms, then per
-- group the id of its oldest undelivered entry (the first after its last-delivered id) and
-- of its oldest pending entry, '' where there is none (C4). Ids are times on this node's
-- clock, so the ages are taken against the TIME read here, in the same script. Runs after
-- stream_ids.lua.
local key = KEYS[1]
local now = redis.call('TIME')
local out = {tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)}
if redis.call('EXISTS', key) == 0 then
  for i = 1, #ARGV do out[#out + 1] = ''; out[#out + 1] = '' end
  return out
end
local known = groups_of(key)
for i = 1, #ARGV do
  local info = known[ARGV[i]]
  local undelivered, pending = '', ''
  if info ~= nil then
    local next_entry = redis.call('XRANGE', key, '(' .. info['last-delivered-id'], '+', 'COUNT', 1)
    if #next_entry > 0 then undelivered = next_entry[1][1] end
    if info['pending'] > 0 then
      local first = redis.call('XPENDING', key, ARGV[i], '-', '+', 1)
      if #first > 0 then pending = first[1][1] end
    end
  end
  out[#out + 1] = undelivered
  out[#out + 1] = pending
end
return out
