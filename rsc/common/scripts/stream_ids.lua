-- A library, no KEYS or ARGV of its own: stream-id helpers put before retention.lua and
-- drain.lua. Ids are compared and incremented as decimal strings: Lua numbers are
-- doubles, and a 64-bit sequence does not fit one.
local function split(id)
  local dash = string.find(id, '-', 1, true)
  return string.sub(id, 1, dash - 1), string.sub(id, dash + 1)
end
local function num_less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local function id_less(a, b)
  local am, as = split(a)
  local bm, bs = split(b)
  if am ~= bm then return num_less(am, bm) end
  return num_less(as, bs)
end
local function incr(digits)
  local tail = ''
  for i = #digits, 1, -1 do
    local d = string.byte(digits, i) - 48
    if d < 9 then return string.sub(digits, 1, i - 1) .. string.char(49 + d) .. tail end
    tail = '0' .. tail
  end
  return '1' .. tail
end
local function next_id(id)
  local ms, seq = split(id)
  if seq == '18446744073709551615' then return incr(ms) .. '-0' end
  return ms .. '-' .. incr(seq)
end
local function fields(flat)
  local out = {}
  for i = 1, #flat, 2 do out[flat[i]] = flat[i + 1] end
  return out
end
local function groups_of(key)
  local out = {}
  for _, flat in ipairs(redis.call('XINFO', 'GROUPS', key)) do
    local info = fields(flat)
    out[info['name']] = info
  end
  return out
end
-- the oldest id a group still needs: its first pending entry, else the one after its last-delivered
local function needed(key, name, info)
  if info['pending'] > 0 then
    local first = redis.call('XPENDING', key, name, '-', '+', 1)
    if #first > 0 then return first[1][1] end
  end
  return next_id(info['last-delivered-id'])
end
-- how many entries lie between two XRANGE bounds (at most limit), page by page
local function count_range(key, start, stop, limit)
  local count = 0
  while limit == nil or count < limit do
    local page = 512
    if limit ~= nil and limit - count < page then page = limit - count end
    local batch = redis.call('XRANGE', key, start, stop, 'COUNT', page)
    count = count + #batch
    if #batch < page then break end
    start = '(' .. batch[#batch][1]
  end
  return count
end
