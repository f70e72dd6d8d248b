-- dead_retry.lua: take one dead letter out of the dead set and schedule it again
-- (`escalation dead retry`, docs/reliability.md).
-- kind "decision": the payload must still exist; the dispute goes back into the pending ZSET
--   due now (Redis TIME) and its failure counter restarts at 0. With KEYS[8..9] (ADR 0006) it
--   is ZREMed from ready first (a member is in at most one of pending / ready) and the record's
--   "prio_weight" (written by dead_letter.lua) goes back into prio.
-- kind "notify": the notification goes into notify_retry due now with ARGV[4] as its record
--   (attempts restarted by the caller).
--
-- KEYS[1]  dead ZSET            KEYS[2]  dead_data HASH
-- KEYS[3]  pending ZSET         KEYS[4]  payload HASH of the dispute (decision) / any shard key
-- KEYS[5]  decision_failures HASH
-- KEYS[6]  notify_retry ZSET    KEYS[7]  notify_data HASH
-- KEYS[8]  ready ZSET (optional) KEYS[9]  prio HASH (optional, with KEYS[8])
-- ARGV[1]  dead member
-- ARGV[2]  kind: "decision" | "notify"
-- ARGV[3]  dispute id (decision) or notify_retry member (notify)
-- ARGV[4]  notify record JSON (notify), or ""
-- Returns: "requeued" | "absent" (not in the dead set) | "no_payload" (decision whose payload
--          is gone: removed from the dead set, reconcile restores it from PostgreSQL)
-- Errors:  "EINVAL dead_retry: <reason>" (nothing written)

local member, kind, target, record = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if kind ~= 'decision' and kind ~= 'notify' then return redis.error_reply('EINVAL dead_retry: bad kind') end
if type(target) ~= 'string' or #target == 0 then return redis.error_reply('EINVAL dead_retry: bad target') end
if kind == 'notify' then
  local ok, decoded = pcall(cjson.decode, record or '')
  if not ok or type(decoded) ~= 'table' then return redis.error_reply('EINVAL dead_retry: bad record') end
end
if #KEYS ~= 7 and #KEYS ~= 9 then return redis.error_reply('EINVAL dead_retry: expected 7 or 9 KEYS') end
if redis.call('ZSCORE', KEYS[1], member) == false then return 'absent' end
local weight = nil
if kind == 'decision' and #KEYS == 9 then
  local ok, rec = pcall(cjson.decode, redis.call('HGET', KEYS[2], member) or '')
  if ok and type(rec) == 'table' and tonumber(rec.prio_weight) then weight = tonumber(rec.prio_weight) end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', KEYS[1], member)
redis.call('HDEL', KEYS[2], member)
if kind == 'decision' then
  redis.call('HDEL', KEYS[5], target)
  if redis.call('EXISTS', KEYS[4]) == 0 then return 'no_payload' end
  if #KEYS == 9 then
    redis.call('ZREM', KEYS[8], target)
    if weight and weight > 0 then redis.call('HSET', KEYS[9], target, tostring(math.floor(weight))) end
  end
  redis.call('ZADD', KEYS[3], now, target)
else
  redis.call('ZADD', KEYS[6], now, target)
  redis.call('HSET', KEYS[7], target, record)
end
return 'requeued'
