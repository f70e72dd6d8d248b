-- claim.lua: claim due members of one shard atomically, materiality first (RedisScheduler.claim;
-- docs/architecture.md "The firing protocol" step 1; ready set: ADR 0006, docs/sla.md
-- "Priority under backlog").
-- now = Redis TIME (the one clock: worker clocks never matter).
-- Step 1 (promote): up to promote_max members of pending with score <= now move to the ready
--   ZSET, scored ready = due - weight * aging_ms (weight = HGET prio member, absent = 0; lower
--   fires first), earliest due first. Nothing is ever moved before it is due.
-- Step 2 (claim): head = the max_items + skip lowest-scored members of ready (after step 1). Each
--   candidate (read by the caller from ready) is re-checked, in order:
--     not in ready                   -> taken meanwhile: skip
--     not in head                    -> a better member was promoted: skip, more = 1
--     no payload HASH                -> STUCK_MEMBER: ZREM ready, HDEL prio, report it,
--                                       stats "stuck" += 1
--     lock held (SET NX refused)     -> LOCK_CONTENTION: skip (stays in ready), contended += 1
--     otherwise                      -> token = the next fencing token (fence + 1, + 2, ... in
--                                       candidate order, as one INCR per member would give; one
--                                       INCRBY fence per call); SET lock "<token>:<worker>" PX lease;
--                                       ZREM ready; ZADD pending (now + lease) (visibility
--                                       timeout); return the payload. stats "claimed" += 1
--   more = 1 also when head holds members that were not candidates (the caller reads again).
--   A candidate repeated in ARGV is considered once.
-- Every argument is validated before the first write. Re-sending after a lost reply claims
-- nothing twice (claimed members are locked and back in pending, in the future).
--
-- KEYS[1]      pending ZSET (score = due time, epoch milliseconds)
-- KEYS[2]      fence STRING (fencing-token counter: GET, then INCRBY by the number claimed)
-- KEYS[3]      stats HASH
-- KEYS[4]      ready ZSET (score = due - weight * aging_ms)
-- KEYS[5]      prio HASH (member -> weight)
-- KEYS[4+2i]   payload HASH of candidate i (i = 1..n); must end with ARGV[6+i]
-- KEYS[5+2i]   lock STRING of candidate i; must end with ARGV[6+i]
-- ARGV[1]      lease_ms: lease / visibility timeout, integer milliseconds 1..86400000
-- ARGV[2]      worker_id: non-empty string, at most 200 bytes
-- ARGV[3]      max_items: most members to claim, integer 1..500
-- ARGV[4]      aging_ms: integer 1..86400000 (one weight unit = aging_ms of waiting)
-- ARGV[5]      promote_max: most members moved pending -> ready, integer 0..10000
-- ARGV[6]      skip: members at the top of ready found locked by earlier rounds of this claim
--              (the head is the max_items + skip lowest), integer 0..10000
-- ARGV[6+i]    candidate i: dispute id (ready member), at most 1000 candidates
-- Returns:     {now_ms, next_due_ms (-1 = nothing pending or ready; now when ready is not
--              empty), contended, more, stuck_ids, items, promoted}
--              items = flat array, 4 entries per claimed member in claim order:
--                id, token, due_ms (before re-scoring), {f1, v1, ...} (the payload)
-- Errors:      "EINVAL claim: <reason>" (nothing written; also when fence is not an integer)

local SCRIPT = 'claim'
-- @include "fail"
-- @include "is_int"

local lease, worker, max_items, aging, pmax, skip = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
if not is_int(lease) or tonumber(lease) < 1 or tonumber(lease) > 86400000 then
  return fail('lease_ms must be an integer 1..86400000')
end
if type(worker) ~= 'string' or #worker == 0 or #worker > 200 then
  return fail('worker_id must be 1..200 bytes')
end
if not is_int(max_items) or tonumber(max_items) < 1 or tonumber(max_items) > 500 then
  return fail('max_items must be an integer 1..500')
end
if not is_int(aging) or tonumber(aging) < 1 or tonumber(aging) > 86400000 then
  return fail('aging_ms must be an integer 1..86400000')
end
if not is_int(pmax) or tonumber(pmax) > 10000 then
  return fail('promote_max must be an integer 0..10000')
end
if not is_int(skip) or tonumber(skip) > 10000 then
  return fail('skip must be an integer 0..10000')
end
local n = #ARGV - 6
if n > 1000 then return fail('at most 1000 candidates') end
if #KEYS ~= 5 + 2 * n then return fail('expected ' .. (5 + 2 * n) .. ' KEYS, got ' .. #KEYS) end
for i = 1, n do
  local id = ARGV[6 + i]
  if #id == 0 or string.sub(KEYS[4 + 2 * i], -#id) ~= id or string.sub(KEYS[5 + 2 * i], -#id) ~= id then
    return fail('KEYS of candidate ' .. i .. ' do not belong to ' .. id)
  end
end
lease, max_items, aging, pmax = tonumber(lease), tonumber(max_items), tonumber(aging), tonumber(pmax)
skip = tonumber(skip)

local fence = redis.call('GET', KEYS[2]) or '0'
if not is_int(fence) then return fail('fence counter is not a non-negative integer') end
local base = tonumber(fence)  -- tokens handed out by this call: base + 1, base + 2, ...

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Commands are batched per call, not per member: the weights come from one HMGET (none when
-- the prio HASH does not exist: every weight is 0),
-- the moves pending -> ready are one ZADD per chunk of CHUNK members + one ZREMRANGEBYRANK
-- (the members read are the lowest-ranked of pending), the claimed members' re-scoring one
-- ZREM (or ZREMRANGEBYRANK when they are the head's first members) + one ZADD per chunk, the
-- fencing tokens one INCRBY (the same consecutive tokens, in candidate order, that one INCR
-- per member would hand out). Per claimed member only HGETALL payload and SET lock NX (which
-- is also the lock check) remain; no Lua table is built per member beyond the reply's.
-- Numbers passed to redis.call are formatted with "%.17g" per argument, and `..` formats with
-- "%.14g": the per-member arguments are strings formatted once per call (lease, visibility
-- deadline) or as integers (the lock's token).
local CHUNK = 500
local format = string.format
local lease_text, until_text = format('%d', lease), format('%.0f', now + lease)
local has_prio = redis.call('EXISTS', KEYS[5]) == 1

-- weights (HMGET prio) of ids[from..to] (every step-th entry of ids from from): absent or
-- malformed = 0
local function weights(ids, from, to, step)
  local args = {}
  for j = from, to, step do args[#args + 1] = ids[j] end
  local raw = redis.call('HMGET', KEYS[5], unpack(args))
  local out = {}
  for j = 1, #raw do out[j] = tonumber(raw[j] or '0') or 0 end
  return out
end

-- step 1: promote due members. due = {id1, score1, id2, score2, ...}, swapped in place to
-- ZADD's {score1, id1, ...}, the scores lowered by weight * aging when prio exists
local promoted = 0
if pmax > 0 then
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, pmax)
  promoted = #due / 2
  for from = 1, #due, 2 * CHUNK do
    local to = math.min(from + 2 * CHUNK - 1, #due)
    local w = has_prio and weights(due, from, to, 2) or nil
    for j = from, to, 2 do
      local id, score = due[j], due[j + 1]
      if w then score = tonumber(score) - w[(j - from) / 2 + 1] * aging end
      due[j], due[j + 1] = score, id
    end
    redis.call('ZADD', KEYS[4], unpack(due, from, to))
  end
  if promoted > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, promoted - 1) end
end

-- step 2: claim candidates that are in the head of ready (a repeated candidate is skipped)
local head = {}
local headlist = redis.call('ZRANGE', KEYS[4], 0, max_items + skip - 1, 'WITHSCORES')
for j = 1, #headlist, 2 do head[headlist[j]] = headlist[j + 1] end
local seen = {}
local stuck = {}
-- claimed candidates, in order: id, ready score, payload; token = base + position
local won_id, won_score, won_flat = {}, {}, {}
local nwon, prefix = 0, true  -- prefix: the claimed members are the head's first ones
local contended, more = 0, 0
for i = 1, n do
  if nwon >= max_items then break end
  local id = ARGV[6 + i]
  if not seen[id] then
    seen[id] = true
    local score = head[id]
    if not score then
      -- not in the head: taken meanwhile (not in ready at all), or a better member was promoted
      if redis.call('ZSCORE', KEYS[4], id) ~= false then more = 1 end
    else
      local flat = redis.call('HGETALL', KEYS[4 + 2 * i])
      if #flat == 0 then
        redis.call('ZREM', KEYS[4], id)
        redis.call('HDEL', KEYS[5], id)
        stuck[#stuck + 1] = id
        prefix = false
      elseif not redis.call('SET', KEYS[5 + 2 * i], format('%d', base + nwon + 1) .. ':' .. worker, 'PX', lease_text, 'NX') then
        contended = contended + 1
      else
        nwon = nwon + 1
        won_id[nwon], won_score[nwon], won_flat[nwon] = id, score, flat
        if prefix and headlist[2 * nwon - 1] ~= id then prefix = false end
      end
    end
  end
end
-- items: {id, token, due_ms, payload} per claimed member, flat
local items = {}
if nwon > 0 then
  redis.call('INCRBY', KEYS[2], nwon)
  if prefix then
    redis.call('ZREMRANGEBYRANK', KEYS[4], 0, nwon - 1)
  end
  for from = 1, nwon, CHUNK do
    local to = math.min(from + CHUNK - 1, nwon)
    local w = has_prio and weights(won_id, from, to, 1) or nil
    local zargs = {}
    for k = from, to do
      local id, due = won_id[k], won_score[k]
      if w then due = tostring(tonumber(due) + w[k - from + 1] * aging) end
      zargs[#zargs + 1] = until_text
      zargs[#zargs + 1] = id
      local at = 4 * k - 3
      items[at], items[at + 1], items[at + 2], items[at + 3] = id, base + k, due, won_flat[k]
    end
    if not prefix then redis.call('ZREM', KEYS[4], unpack(won_id, from, to)) end
    redis.call('ZADD', KEYS[1], unpack(zargs))
  end
end
for r = 1, #headlist / 2 do
  if r > skip and not seen[headlist[2 * r - 1]] then more = 1 break end
end
if nwon > 0 then redis.call('HINCRBY', KEYS[3], 'claimed', nwon) end
if #stuck > 0 then redis.call('HINCRBY', KEYS[3], 'stuck', #stuck) end
if contended > 0 then redis.call('HINCRBY', KEYS[3], 'lock_contended', contended) end
local next_due = -1
if redis.call('ZCARD', KEYS[4]) > 0 then
  next_due = now
else
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if first[2] then next_due = first[2] end
end
return {now, next_due, contended, more, stuck, items, promoted}
