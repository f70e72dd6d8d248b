-- claim.lua: claim due members of one shard atomically (RedisScheduler.claim; DESIGN.md "The
-- firing protocol" step 1). now = Redis TIME (the one clock: worker clocks never matter).
-- Candidates come from a cheap read by the caller; each one is re-checked here, in order:
--   score missing or > now, lock held  -> taken by another worker meanwhile: skip
--   score missing or > now, no lock    -> not due: skip and set stop = 1
--   no payload HASH                    -> STUCK_MEMBER: ZREM it, report it, stats "stuck" += 1
--   lock held                          -> LOCK_CONTENTION: skip, contended += 1,
--                                         stats "lock_contended" += 1
--   otherwise                          -> token = INCR fence; SET lock "<token>:<worker>" PX
--                                         lease; ZADD pending (now + lease) (visibility
--                                         timeout: a crashed worker's member comes due again
--                                         by itself); return the payload. stats "claimed" += 1
-- Stops claiming once max_items members were claimed (stop = 1). Every argument is validated
-- before the first write. Re-sending after a lost reply claims nothing twice: claimed members
-- are locked and re-scored into the future (they then count as taken).
--
-- KEYS[1]      pending ZSET (score = due time, epoch milliseconds)
-- KEYS[2]      fence STRING (fencing-token counter, INCR)
-- KEYS[3]      stats HASH
-- KEYS[2+2i]   payload HASH of candidate i (i = 1..n); must end with ARGV[3+i]
-- KEYS[3+2i]   lock STRING of candidate i; must end with ARGV[3+i]
-- ARGV[1]      lease_ms: lease / visibility timeout, integer milliseconds 1..86400000
-- ARGV[2]      worker_id: non-empty string, at most 200 bytes
-- ARGV[3]      max_items: most members to claim, integer 1..500
-- ARGV[3+i]    candidate i: dispute id (ZSET member), at most 1000 candidates
-- Returns:     {now_ms, next_due_ms (-1 = ZSET empty), contended, stop, stuck_ids, items}
--              stuck_ids = array of member ids removed as STUCK_MEMBER
--              items     = array of {id, token, score_ms (before re-scoring), {f1, v1, ...}}
--              stop      = 1 when a not-due unlocked candidate was seen or max_items reached
-- Errors:      "EINVAL claim: <reason>" (nothing written)

local function fail(msg) return redis.error_reply('EINVAL claim: ' .. msg) end
local function is_int(s) return type(s) == 'string' and string.match(s, '^%d+$') ~= nil and #s <= 16 end

local lease, worker, max_items = ARGV[1], ARGV[2], ARGV[3]
if not is_int(lease) or tonumber(lease) < 1 or tonumber(lease) > 86400000 then
  return fail('lease_ms must be an integer 1..86400000')
end
if type(worker) ~= 'string' or #worker == 0 or #worker > 200 then
  return fail('worker_id must be 1..200 bytes')
end
if not is_int(max_items) or tonumber(max_items) < 1 or tonumber(max_items) > 500 then
  return fail('max_items must be an integer 1..500')
end
local n = #ARGV - 3
if n > 1000 then return fail('at most 1000 candidates') end
if #KEYS ~= 3 + 2 * n then return fail('expected ' .. (3 + 2 * n) .. ' KEYS, got ' .. #KEYS) end
for i = 1, n do
  local id = ARGV[3 + i]
  if #id == 0 or string.sub(KEYS[2 + 2 * i], -#id) ~= id or string.sub(KEYS[3 + 2 * i], -#id) ~= id then
    return fail('KEYS of candidate ' .. i .. ' do not belong to ' .. id)
  end
end
lease = tonumber(lease)
max_items = tonumber(max_items)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local items, stuck = {}, {}
local contended, stop = 0, 0
for i = 1, n do
  if #items >= max_items then stop = 1 break end
  local id, pkey, lkey = ARGV[3 + i], KEYS[2 + 2 * i], KEYS[3 + 2 * i]
  local score = redis.call('ZSCORE', KEYS[1], id)
  local locked = redis.call('EXISTS', lkey) == 1
  if score == false or tonumber(score) > now then
    if not locked and score ~= false then stop = 1 end
  elseif redis.call('EXISTS', pkey) == 0 then
    redis.call('ZREM', KEYS[1], id)
    stuck[#stuck + 1] = id
  elseif locked then
    contended = contended + 1
  else
    local token = redis.call('INCR', KEYS[2])
    redis.call('SET', lkey, token .. ':' .. worker, 'PX', lease)
    redis.call('ZADD', KEYS[1], now + lease, id)
    items[#items + 1] = {id, token, score, redis.call('HGETALL', pkey)}
  end
end
if #items > 0 then redis.call('HINCRBY', KEYS[3], 'claimed', #items) end
if #stuck > 0 then redis.call('HINCRBY', KEYS[3], 'stuck', #stuck) end
if contended > 0 then redis.call('HINCRBY', KEYS[3], 'lock_contended', contended) end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local next_due = -1
if first[2] then next_due = first[2] end
return {now, next_due, contended, stop, stuck, items}
