-- KEYS[1] a sealed shard stream; ARGV[1..] the groups. Returns {undelivered, pending} per
-- group. An entry removed by retention counts as delivered: undelivered counts entries that
-- still exist. Runs after stream_ids.lua.
local key = KEYS[1]
local out = {}
if redis.call('EXISTS', key) == 0 then
  for i = 1, #ARGV do out[#out + 1] = 0; out[#out + 1] = 0 end
  return out
end
local stream = fields(redis.call('XINFO', 'STREAM', key))
local length = stream['length']
local known = groups_of(key)
for i = 1, #ARGV do
  local info = known[ARGV[i]]
  local undelivered, pending = length, 0
  if info ~= nil then
    pending = info['pending']
    local last = info['last-delivered-id']
    if length == 0 or not id_less(last, stream['last-entry'][1]) then
      undelivered = 0
    elseif id_less(last, stream['first-entry'][1]) then
      undelivered = length
    elseif info['lag'] then
      -- trims only cut below first-entry <= last, and Redis reports nil lag when a deletion
      -- lies after last: so lag counts exactly the entries after last that still exist
      undelivered = info['lag']
    else
      undelivered = count_range(key, '(' .. last, '+', nil)
    end
  end
  out[#out + 1] = undelivered
  out[#out + 1] = pending
end
return out
