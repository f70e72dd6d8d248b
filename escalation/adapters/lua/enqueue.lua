-- enqueue.lua: schedule escalations atomically and idempotently (RedisScheduler.enqueue/_many,
-- enqueue_encoded), optionally with their pre-breach warnings.
-- For each item: if its payload HASH does not exist, HSET the payload and ZADD the member at
-- due_ms (1 = scheduled); if it exists, change nothing (0 = already scheduled). If an added
-- member is earlier than everything pending before the call, LPUSH "1" to the wake LIST and
-- LTRIM it to one element so sleeping workers wake early. (Cost per item: one EXISTS and one
-- HSET; the members go to the ZSET with one multi-member ZADD per 1000 after the HSETs, and the
-- arguments are checked without copying them into a table per item: the Lua bookkeeping per
-- item cost more than the commands.) Then, for each item scheduled by this
-- call whose warnings reference is not 0, its warnings are added to the warnings ZSET with one
-- ZADD NX per 1000 (member "<id>:<suffix>", score = warning time; an existing member keeps its
-- score), and when that added any and the ZSET's first member is one of them, the wake LIST
-- gets its marker too (what RedisWarnings.schedule does). An item already scheduled adds no
-- warnings. Every argument is validated before the first write; re-sending the call is
-- harmless (the second run returns 0s and adds nothing).
--
-- KEYS[1]    pending ZSET (member = dispute id, score = due time, epoch milliseconds)
-- KEYS[2]    wake LIST (at most one marker element)
-- KEYS[3]    stats HASH (counter "enqueued")
-- KEYS[4]    warnings ZSET (member "<id>:<seq>:<fraction>", score = warning time, epoch ms);
--            written only when ARGV[1] is not empty
-- KEYS[4+i]  payload HASH of item i (i = 1..n); must end with the item's dispute id
-- ARGV[1]    warnings table: "" (no warnings), or a JSON array of at most 1000 lists, each
--            [suffix_1, ms_1, ..., suffix_k, ms_k] (k <= 16): member suffixes after "<id>:"
--            (non-empty strings, at most 100 bytes) and warning times (decimal integer strings,
--            epoch ms); items of one request shape share one list
-- ARGV[2]    warnings references: "" (with ARGV[1] ""), or a JSON array of n integers, item i's
--            list in the table (1-based), 0 = no warnings
-- ARGV[3..]  n groups, one per item i, in KEYS order:
--              id        dispute id (non-empty string, at most 100 bytes)
--              due_ms    due time, integer epoch milliseconds (0 .. 10^15)
--              nfields   number of field/value pairs that follow (integer 1..32)
--              field_1, value_1, ..., field_nfields, value_nfields   payload fields (strings)
-- Returns:   array of n integers: 1 = scheduled now, 0 = payload already existed (no change)
-- Errors:    "EINVAL enqueue: <reason>" (nothing written) for any malformed argument.

local SCRIPT = 'enqueue'
-- @include "fail"
-- @include "is_int"

-- per item, in parallel arrays (no table per item: this loop runs once per enqueued row):
-- its dispute id, due_ms and the ARGV range of its field/value pairs (payload key KEYS[4 + i])
local ids, dues, from_a, to_a = {}, {}, {}, {}
local a = 3
local nargv = #ARGV
local nkeys = #KEYS
if nkeys < 4 then return fail('expected at least 4 KEYS, got ' .. nkeys) end
for k = 5, nkeys do
  local id, due, nf = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  if id == nil or #id == 0 or #id > 100 then return fail('bad id at ARGV[' .. a .. ']') end
  if string.sub(KEYS[k], -#id) ~= id then return fail('KEYS[' .. k .. '] is not the payload key of ' .. id) end
  if not is_int(due) then return fail('due_ms of ' .. id .. ' is not an integer') end
  if not is_int(nf) or tonumber(nf) < 1 or tonumber(nf) > 32 then return fail('nfields of ' .. id .. ' not in 1..32') end
  local last = a + 2 + 2 * tonumber(nf)
  if last > nargv then return fail('missing field/value for ' .. id) end
  for j = a + 3, last, 2 do
    if #ARGV[j] == 0 then return fail('empty field name for ' .. id) end
  end
  local i = #ids + 1
  ids[i], dues[i], from_a[i], to_a[i] = id, tonumber(due), a + 3, last
  a = last + 1
end
if a ~= nargv + 1 then return fail('ARGV has ' .. nargv .. ' values, items use ' .. (a - 1)) end
local n = #ids

-- the warnings table and references (ARGV[1], ARGV[2]): checked whole before any write
local wtable, wrefs = nil, nil
if ARGV[1] ~= '' then
  local ok, t = pcall(cjson.decode, ARGV[1])
  if not ok or type(t) ~= 'table' or #t > 1000 then return fail('bad warnings table') end
  for r = 1, #t do
    local list = t[r]
    if type(list) ~= 'table' or #list % 2 ~= 0 or #list > 32 then
      return fail('warnings list ' .. r .. ': expected [suffix, ms, ...], at most 16 pairs')
    end
    for j = 1, #list, 2 do
      local suffix, ms = list[j], list[j + 1]
      if type(suffix) ~= 'string' or #suffix == 0 or #suffix > 100 or not is_int(ms) then
        return fail('warnings list ' .. r .. ': bad suffix or ms at ' .. j)
      end
    end
  end
  local okr, refs = pcall(cjson.decode, ARGV[2])
  if not okr or type(refs) ~= 'table' or #refs ~= n then
    return fail('warnings references: expected a JSON array of ' .. n .. ' integers')
  end
  for i = 1, #refs do
    local r = refs[i]
    if type(r) ~= 'number' or r % 1 ~= 0 or r < 0 or r > #t then
      return fail('warnings reference ' .. i .. ' is not 0..' .. #t)
    end
  end
  wtable, wrefs = t, refs
elseif ARGV[2] ~= '' then
  return fail('warnings references without a warnings table')
end

local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local earliest = first[2] and tonumber(first[2]) or nil
local result = {}
local added = 0
local wake = false
local zargs = {}  -- score, member pairs for one multi-member ZADD per 1000 at the end
for i = 1, n do
  if redis.call('EXISTS', KEYS[4 + i]) == 1 then
    result[i] = 0
  else
    redis.call('HSET', KEYS[4 + i], unpack(ARGV, from_a[i], to_a[i]))
    zargs[#zargs + 1] = dues[i]
    zargs[#zargs + 1] = ids[i]
    result[i] = 1
    added = added + 1
    if earliest == nil or dues[i] < earliest then wake = true end
  end
end
for from = 1, #zargs, 2000 do
  redis.call('ZADD', KEYS[1], unpack(zargs, from, math.min(from + 1999, #zargs)))
end
if added > 0 then redis.call('HINCRBY', KEYS[3], 'enqueued', added) end
if wtable and added > 0 then
  local wargs, mine = {}, {}
  for i = 1, n do
    local r = wrefs[i]
    if result[i] == 1 and r > 0 then
      local list = wtable[r]
      for j = 1, #list, 2 do
        local member = ids[i] .. ':' .. list[j]
        wargs[#wargs + 1] = list[j + 1]
        wargs[#wargs + 1] = member
        mine[member] = true
      end
    end
  end
  local new = 0
  for from = 1, #wargs, 2000 do
    new = new + redis.call('ZADD', KEYS[4], 'NX', unpack(wargs, from, math.min(from + 1999, #wargs)))
  end
  if new > 0 then
    local head = redis.call('ZRANGE', KEYS[4], 0, 0)
    if head[1] and mine[head[1]] then wake = true end
  end
end
if wake then
  redis.call('LPUSH', KEYS[2], '1')
  redis.call('LTRIM', KEYS[2], 0, 0)
end
return result
