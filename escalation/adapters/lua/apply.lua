-- apply.lua: apply recorded decisions to one shard (RedisScheduler.apply / restore;
-- docs/architecture.md "The firing protocol" step 4). Runs after PostgreSQL recorded the
-- decision; each op is guarded by its sequence number (repeats and late workers have no
-- effect) and, when a token is given, by the fencing token held in the lock (stale workers are
-- refused).
-- Per op, in order:
--   no payload HASH:
--     create = "1" and action reschedule/park, lock free -> write payload (+ ZADD if
--                                                         reschedule), XADD notify when
--                                                         given: "applied" (reconcile sends
--                                                         one only after finding no stream
--                                                         entry with its idempotency key)
--     create = "1" and lock held                       -> "not_owner" (never touch a held member)
--     otherwise                                         -> "missing" (cancelled: never brought back)
--   payload seq >= op seq                                 -> "stale_seq": nothing changes, except
--     that a lock owned by this op's token is released (a re-sent apply lands here) and, for
--     a reschedule at equal seq by that owner, the member goes back to the payload's due_ms
--     (the claim is handed back without a new decision). Repair:
--     create = "1", action reschedule, equal seq, lock free and the member missing from the
--     ZSET -> ZADD at due_ms: "applied"
--   token given and the lock's token differs (or no lock) -> "not_owner" (nothing changed)
--   create = "1" and lock held                            -> "not_owner" (never touch a held member)
--   otherwise "applied":
--     reschedule -> replace the payload with fields, ZADD pending due_ms
--     remove     -> ZREM + DEL payload (terminal escalations never ZADD)
--     park       -> ZREM, replace the payload with fields (keeps the new seq; paused)
--     then XADD notify to the review STREAM (MAXLEN ~ ARGV[1]) when given -- and, when notify
--     carries a "seq" field, only if the payload's seq before this op was below it (the
--     notification of decision <seq> is sent by whichever apply first moves the payload past
--     <seq>: worker, stale-claim repair, reconcile; never twice) -- and DEL the lock when this
--     op's token owns it.
-- Stats counters: applied, stale_apply, not_owner (a worker's token no longer holds the lock:
-- its lease expired mid-flight), restore_held ("not_owner" answered to a restore, create = "1",
-- because a worker holds the member: ladder apply and reconcile retry it; not a lease
-- problem), missing. Every op is validated before the first write; re-sending the call
-- yields "stale_seq" for ops already applied.
--
-- Writes to the shard's shared keys (ZREM ready, ZADD / ZREM pending, HDEL prio) are collected
-- and sent as one multi-member command per kind at the end (or before an op whose id repeats
-- an earlier op's, so a repeated id sees its predecessor's writes): per applied op only
-- HGET seq, GET lock, DEL payload (+ lock), HSET payload and XADD remain.
--
-- KEYS[1]      pending ZSET (score = due time, epoch milliseconds)
-- KEYS[2]      review STREAM
-- KEYS[3]      stats HASH
-- KEYS[2+2i]   payload HASH of op i (i = 1..n); must end with the op's id
-- KEYS[3+2i]   lock STRING of op i; must end with the op's id
-- KEYS[n*2+4]  ready ZSET (ADR 0006: due members waiting for a claim; every write to
--              pending also ZREMs ready, so a member is in at most one of them)
-- KEYS[n*2+5]  prio HASH (member -> weight; HDEL on remove)
-- KEYS[n*2+6]  warnings ZSET (only with the warnings argument below)
-- KEYS[n*2+7]  wake LIST (only with the warnings argument below)
-- ARGV[1]      review stream approximate MAXLEN, integer 1..100000000
-- ARGV[2]      the ops' pair lists, one JSON array of 2n arrays of strings: fields of op 1,
--              notify of op 1, fields of op 2, ... (one cjson.decode per call):
--                fields  [f1, v1, ...]: payload fields (required, non-empty, for
--                        reschedule/park; names non-empty; at most 64 strings)
--                notify  [f1, v1, ...]: review stream entry fields, or [] for none (names
--                        non-empty; at most 64 strings)
-- ARGV[3..]    the ops, 6 strings each: op i is ARGV[p] .. ARGV[p+5] with p = 6 * i - 3:
--                ARGV[p]        id      dispute id (ZSET member), 1..100 bytes
--                ARGV[p+1]      action  "reschedule" | "remove" | "park"
--                ARGV[p+2]      token   fencing token, decimal integer string, or "" (owner-less
--                                       repair)
--                ARGV[p+3]      seq     sequence number recorded in PostgreSQL, decimal integer
--                ARGV[p+4]      due_ms  due time, integer epoch milliseconds (required for
--                                       reschedule; otherwise any string)
--                ARGV[p+5]      create  "1" = restore mode (may create a missing payload), else "0"
-- ARGV[6n+3]   optional (present when #ARGV = 6n + 3): the pre-breach warnings of the ops,
--              one flat JSON array of triples: op index i (1..n), suffix "<seq>:<fraction>",
--              score (integer epoch ms), at most 16 triples per op; the warning's member is
--              "<id of op i>:<suffix>" (RedisWarnings' member form). After all ops ran, the
--              warnings of the ops whose outcome is "applied" are added with one ZADD NX to
--              KEYS[n*2+6] (an existing member keeps its score); when that added any and the ZSET's first member is one of them,
--              the wake LIST KEYS[n*2+7] gets one "1" (LPUSH + LTRIM to one element), as
--              RedisWarnings.schedule does, so a worker caching a later warning time wakes.
-- Returns:     one string of n characters, the outcome of op i at position i:
--              "a" applied, "s" stale_seq, "o" not_owner, "m" missing
-- Errors:      "EINVAL apply: <reason>" (nothing written)

local SCRIPT = 'apply'
-- @include "fail"
-- @include "is_int"
local tonumber, type, pcall, decode = tonumber, type, pcall, cjson.decode
local ACTIONS = {reschedule = true, remove = true, park = true}

local maxlen = ARGV[1]
if not is_int(maxlen) or tonumber(maxlen) < 1 or tonumber(maxlen) > 100000000 then
  return fail('review MAXLEN must be an integer 1..100000000')
end
if #ARGV < 2 then return fail('missing the pair lists') end
local with_warnings = (#ARGV - 2) % 6 == 1
if (#ARGV - 2) % 6 ~= 0 and not with_warnings then return fail('ops must be 6 strings each') end
local n = math.floor((#ARGV - 2) / 6)
local nkeys = 5 + 2 * n + (with_warnings and 2 or 0)
if #KEYS ~= nkeys then return fail('expected ' .. nkeys .. ' KEYS, got ' .. #KEYS) end
local warns = {}
if with_warnings then
  local ok, t = pcall(decode, ARGV[#ARGV])
  if not ok or type(t) ~= 'table' or #t % 3 ~= 0 or #t > 48 * n then return fail('bad warnings') end
  for j = 1, #t, 3 do
    local pos, suffix, ms = t[j], t[j + 1], t[j + 2]
    if type(pos) ~= 'number' or pos < 1 or pos > n or pos % 1 ~= 0
        or type(suffix) ~= 'string' or #suffix == 0 or type(ms) ~= 'number' or ms < 0
        or ms % 1 ~= 0 or ms > 9007199254740992 then
      return fail('warning ' .. ((j + 2) / 3) .. ': expected op index, member suffix, score')
    end
  end
  warns = t
end
local okl, lists = pcall(decode, ARGV[2])
if not okl or type(lists) ~= 'table' or #lists ~= 2 * n then
  return fail('pair lists must be a JSON array of ' .. (2 * n) .. ' arrays')
end
-- validate every op before the first write. Op i is ARGV[6 * i - 3 .. 6 * i + 2]; its payload
-- fields are lists[2i - 1] (kept as fields[i]), its review entry lists[2i] (notify[i]), and the
-- value of the entry's "seq" field, as a number, goes to nseq[i] (none, or not a number: no
-- seq guard)
local fields, notify, nseq = {}, {}, {}
for i = 1, n do
  local p = 6 * i - 3
  local id, action, token = ARGV[p], ARGV[p + 1], ARGV[p + 2]
  local lid = #id
  if lid == 0 or lid > 100 then return fail('op ' .. i .. ': bad id') end
  if string.sub(KEYS[2 + 2 * i], -lid) ~= id or string.sub(KEYS[3 + 2 * i], -lid) ~= id then
    return fail('op ' .. i .. ': KEYS do not belong to ' .. id)
  end
  if not ACTIONS[action] then return fail('op ' .. i .. ': bad action') end
  if token ~= '' and not is_int(token) then return fail('op ' .. i .. ': bad token') end
  if not is_int(ARGV[p + 3]) then return fail('op ' .. i .. ': bad seq') end
  if action == 'reschedule' and not is_int(ARGV[p + 4]) then return fail('op ' .. i .. ': bad due_ms') end
  local create = ARGV[p + 5]
  if create ~= '0' and create ~= '1' then return fail('op ' .. i .. ': bad create flag') end
  local t = lists[2 * i - 1]
  local len = type(t) == 'table' and #t or -1
  if len < 0 or len % 2 ~= 0 or len > 64 or (len == 0 and action ~= 'remove') then
    return fail('op ' .. i .. ': bad fields')
  end
  for j = 1, len, 2 do
    local name, value = t[j], t[j + 1]
    if type(name) ~= 'string' or name == '' or type(value) ~= 'string' then
      return fail('op ' .. i .. ': bad fields')
    end
  end
  fields[i] = t
  t = lists[2 * i]
  len = type(t) == 'table' and #t or -1
  if len < 0 or len % 2 ~= 0 or len > 64 then return fail('op ' .. i .. ': bad notify') end
  for j = 1, len, 2 do
    local name, value = t[j], t[j + 1]
    if type(name) ~= 'string' or name == '' or type(value) ~= 'string' then
      return fail('op ' .. i .. ': bad notify')
    end
    if name == 'seq' then nseq[i] = tonumber(value) end
  end
  notify[i] = t
end
local PENDING, REVIEW = KEYS[1], KEYS[2]
local READY, PRIO = KEYS[4 + 2 * n], KEYS[5 + 2 * n]
local function scheduled(id)
  return redis.call('ZSCORE', PENDING, id) ~= false or redis.call('ZSCORE', READY, id) ~= false
end

-- collected writes to the shared keys: ids to ZREM from ready / pending, HDEL from prio, and
-- score, id pairs to ZADD to pending
local zrem_ready, zrem_pending, hdel_prio, zadd_pending = {}, {}, {}, {}
local collected = {}  -- ids with a collected write
local CHUNK = 1000
local function flush()
  for from = 1, #zrem_ready, CHUNK do
    redis.call('ZREM', READY, unpack(zrem_ready, from, math.min(from + CHUNK - 1, #zrem_ready)))
  end
  for from = 1, #zrem_pending, CHUNK do
    redis.call('ZREM', PENDING, unpack(zrem_pending, from, math.min(from + CHUNK - 1, #zrem_pending)))
  end
  for from = 1, #hdel_prio, CHUNK do
    redis.call('HDEL', PRIO, unpack(hdel_prio, from, math.min(from + CHUNK - 1, #hdel_prio)))
  end
  for from = 1, #zadd_pending, 2 * CHUNK do
    redis.call('ZADD', PENDING, unpack(zadd_pending, from, math.min(from + 2 * CHUNK - 1, #zadd_pending)))
  end
  zrem_ready, zrem_pending, hdel_prio, zadd_pending, collected = {}, {}, {}, {}, {}
end

local result = {}
local applied, stale, not_owner, missing, restore_held = 0, 0, 0, 0, 0
for i = 1, n do
  local p = 6 * i - 3
  local id, action, token, seq, due_ms = ARGV[p], ARGV[p + 1], ARGV[p + 2], ARGV[p + 3], ARGV[p + 4]
  local pkey, lkey = KEYS[2 + 2 * i], KEYS[3 + 2 * i]
  local note = notify[i]
  if collected[id] then flush() end
  local pseq = redis.call('HGET', pkey, 'seq')
  local pnum, snum = pseq and tonumber(pseq), tonumber(seq)  -- each parsed once
  if pseq ~= false and pnum == nil then pseq, pnum = '0', 0 end  -- corrupt seq: behind everything
  local lockval = redis.call('GET', lkey)
  local locktok = lockval and string.match(lockval, '^(%d+):') or nil
  local restore = ARGV[p + 5] == '1'
  local out, held
  if pseq == false then
    if restore and action ~= 'remove' then
      if lockval then
        out, held = 'o', true
      else
        redis.call('DEL', pkey)
        redis.call('HSET', pkey, unpack(fields[i]))
        if action == 'reschedule' then
          redis.call('ZREM', READY, id)
          redis.call('ZADD', PENDING, due_ms, id)
        end
        if #note > 0 then  -- re-created payload: the caller checked the stream
          redis.call('XADD', REVIEW, 'MAXLEN', '~', maxlen, '*', unpack(note))
        end
        out = 'a'
      end
    else
      out = 'm'
    end
  elseif pnum >= snum then
    out = 's'
    if restore and not lockval and action == 'reschedule' and pnum == snum
        and not scheduled(id) then
      redis.call('ZADD', PENDING, due_ms, id)
      out = 'a'
    end
    if token ~= '' and locktok == token then
      if action == 'reschedule' and pnum == snum then
        local due = redis.call('HGET', pkey, 'due_ms')
        if due and scheduled(id) then
          redis.call('ZREM', READY, id)
          redis.call('ZADD', PENDING, due, id)
        end
      end
      redis.call('DEL', lkey)
    end
  elseif token ~= '' and locktok ~= token then
    out = 'o'
  elseif restore and lockval then
    out, held = 'o', true
  else
    collected[id] = true
    zrem_ready[#zrem_ready + 1] = id
    if action == 'remove' then
      zrem_pending[#zrem_pending + 1] = id
      hdel_prio[#hdel_prio + 1] = id
      if token ~= '' then redis.call('DEL', pkey, lkey) else redis.call('DEL', pkey) end
    else
      if action == 'reschedule' then
        zadd_pending[#zadd_pending + 1] = due_ms
        zadd_pending[#zadd_pending + 1] = id
      else
        zrem_pending[#zrem_pending + 1] = id
      end
      if token ~= '' then redis.call('DEL', pkey, lkey) else redis.call('DEL', pkey) end
      redis.call('HSET', pkey, unpack(fields[i]))
    end
    if #note > 0 then
      local s = nseq[i]
      if s == nil or pnum < s then
        redis.call('XADD', REVIEW, 'MAXLEN', '~', maxlen, '*', unpack(note))
      end
    end
    out = 'a'
  end
  if out == 'a' then applied = applied + 1
  elseif out == 's' then stale = stale + 1
  elseif out == 'o' and held then restore_held = restore_held + 1
  elseif out == 'o' then not_owner = not_owner + 1
  else missing = missing + 1 end
  result[i] = out
end
flush()
if #warns > 0 then
  local zargs, mine = {}, {}
  for j = 1, #warns, 3 do
    local pos = warns[j]
    if result[pos] == 'a' then
      local member = ARGV[6 * pos - 3] .. ':' .. warns[j + 1]
      zargs[#zargs + 1] = warns[j + 2]
      zargs[#zargs + 1] = member
      mine[member] = true
    end
  end
  if #zargs > 0 then
    local wkey, wake = KEYS[6 + 2 * n], KEYS[7 + 2 * n]
    local added = 0
    for from = 1, #zargs, 2 * CHUNK do
      added = added + redis.call('ZADD', wkey, 'NX', unpack(zargs, from, math.min(from + 2 * CHUNK - 1, #zargs)))
    end
    if added > 0 then
      local first = redis.call('ZRANGE', wkey, 0, 0)
      if first[1] and mine[first[1]] then
        redis.call('LPUSH', wake, '1')
        redis.call('LTRIM', wake, 0, 0)
      end
    end
  end
end
if applied > 0 then redis.call('HINCRBY', KEYS[3], 'applied', applied) end
if stale > 0 then redis.call('HINCRBY', KEYS[3], 'stale_apply', stale) end
if not_owner > 0 then redis.call('HINCRBY', KEYS[3], 'not_owner', not_owner) end
if restore_held > 0 then redis.call('HINCRBY', KEYS[3], 'restore_held', restore_held) end
if missing > 0 then redis.call('HINCRBY', KEYS[3], 'missing', missing) end
return table.concat(result)
