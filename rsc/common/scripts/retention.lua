-- KEYS[1] a shard stream. ARGV[1] '1': trim what every group acked (T1); ARGV[2] the max
-- length or ''; ARGV[3] the age cut id (entries below it go) or ''; ARGV[4..] the prefix's
-- groups. Returns {removed by acks, removed by caps, removed unconsumed, length after}.
-- Runs after stream_ids.lua.
local key = KEYS[1]
if redis.call('EXISTS', key) == 0 then return {0, 0, 0, 0} end
local known = groups_of(key)
local oldest = nil
local complete = true
for i = 4, #ARGV do
  local info = known[ARGV[i]]
  if info == nil then
    complete = false
  else
    local id = needed(key, ARGV[i], info)
    if oldest == nil or id_less(id, oldest) then oldest = id end
  end
end
-- a group with no consumer group here has read nothing: everything is unconsumed for it
if not complete then oldest = '0-0' end
local by_acks, by_caps, unconsumed = 0, 0, 0
local below_oldest_gone = false
if ARGV[1] == '1' and complete and oldest ~= nil then
  by_acks = redis.call('XTRIM', key, 'MINID', oldest)
  below_oldest_gone = true
end
if ARGV[3] ~= '' then
  local cut = ARGV[3]
  local lost = 0
  if oldest ~= nil and id_less(oldest, cut) and not below_oldest_gone then
    lost = count_range(key, oldest, '(' .. cut, nil)
  end
  local removed = redis.call('XTRIM', key, 'MINID', cut)
  if below_oldest_gone and oldest ~= nil then lost = removed end
  by_caps = by_caps + removed
  unconsumed = unconsumed + lost
end
if ARGV[2] ~= '' then
  local excess = redis.call('XLEN', key) - tonumber(ARGV[2])
  if excess > 0 then
    if oldest ~= nil then
      local acked = 0
      if not below_oldest_gone and oldest ~= '0-0' then
        acked = count_range(key, '-', '(' .. oldest, excess)
      end
      unconsumed = unconsumed + excess - acked
    end
    by_caps = by_caps + redis.call('XTRIM', key, 'MAXLEN', ARGV[2])
  end
end
return {by_acks, by_caps, unconsumed, redis.call('XLEN', key)}
