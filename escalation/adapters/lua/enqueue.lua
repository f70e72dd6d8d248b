-- enqueue.lua: schedule escalations atomically and idempotently (RedisScheduler.enqueue/_many).
-- For each item: if its payload HASH does not exist, HSET the payload and ZADD the member at
-- due_ms (1 = scheduled); if it exists, change nothing (0 = already scheduled). If an added
-- member is earlier than everything pending before the call, LPUSH "1" to the wake LIST and
-- LTRIM it to one element so sleeping workers wake early. Every argument is validated before
-- the first write; re-sending the call is harmless (the second run returns 0s).
--
-- KEYS[1]    pending ZSET (member = dispute id, score = due time, epoch milliseconds)
-- KEYS[2]    wake LIST (at most one marker element)
-- KEYS[3]    stats HASH (counter "enqueued")
-- KEYS[3+i]  payload HASH of item i (i = 1..n); must end with the item's dispute id
-- ARGV       n groups, one per item i, in KEYS order:
--              id        dispute id (non-empty string, at most 100 bytes)
--              due_ms    due time, integer epoch milliseconds (0 .. 10^15)
--              nfields   number of field/value pairs that follow (integer 1..32)
--              field_1, value_1, ..., field_nfields, value_nfields   payload fields (strings)
-- Returns:   array of n integers: 1 = scheduled now, 0 = payload already existed (no change)
-- Errors:    "EINVAL enqueue: <reason>" (nothing written) for any malformed argument.

local function fail(msg) return redis.error_reply('EINVAL enqueue: ' .. msg) end
local function is_int(s) return type(s) == 'string' and string.match(s, '^%d+$') ~= nil and #s <= 16 end

local items = {}
local a = 1
local nkeys = #KEYS
for k = 4, nkeys do
  local id, due, nf = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  if type(id) ~= 'string' or #id == 0 or #id > 100 then return fail('bad id at ARGV[' .. a .. ']') end
  if string.sub(KEYS[k], -#id) ~= id then return fail('KEYS[' .. k .. '] is not the payload key of ' .. id) end
  if not is_int(due) then return fail('due_ms of ' .. id .. ' is not an integer') end
  if not is_int(nf) or tonumber(nf) < 1 or tonumber(nf) > 32 then return fail('nfields of ' .. id .. ' not in 1..32') end
  local fields = {}
  for j = 1, 2 * tonumber(nf) do
    local v = ARGV[a + 2 + j]
    if type(v) ~= 'string' then return fail('missing field/value for ' .. id) end
    if j % 2 == 1 and #v == 0 then return fail('empty field name for ' .. id) end
    fields[j] = v
  end
  items[#items + 1] = {key = KEYS[k], id = id, due = tonumber(due), fields = fields}
  a = a + 3 + 2 * tonumber(nf)
end
if a ~= #ARGV + 1 then return fail('ARGV has ' .. #ARGV .. ' values, items use ' .. (a - 1)) end

local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local earliest = first[2] and tonumber(first[2]) or nil
local result = {}
local added = 0
local wake = false
for i, it in ipairs(items) do
  if redis.call('EXISTS', it.key) == 1 then
    result[i] = 0
  else
    redis.call('HSET', it.key, unpack(it.fields))
    redis.call('ZADD', KEYS[1], it.due, it.id)
    result[i] = 1
    added = added + 1
    if earliest == nil or it.due < earliest then wake = true end
  end
end
if added > 0 then redis.call('HINCRBY', KEYS[3], 'enqueued', added) end
if wake then
  redis.call('LPUSH', KEYS[2], '1')
  redis.call('LTRIM', KEYS[2], 0, 0)
end
return result
