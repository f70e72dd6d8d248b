-- cancel.lua: remove one escalation from the scheduler atomically (RedisScheduler.cancel).
-- ZREM the member, DEL its payload and DEL its lock in one step. A worker that still holds the
-- claim afterwards gets MISSING from apply (no payload), so a cancelled dispute never comes
-- back. Re-sending is harmless (returns 0 the second time).
--
-- KEYS[1]  pending ZSET
-- KEYS[2]  payload HASH of the dispute (must end with ARGV[1])
-- KEYS[3]  lock STRING of the dispute (must end with ARGV[1])
-- KEYS[4]  stats HASH (counter "cancelled")
-- KEYS[5]  ready ZSET (issue 4 C: the member may be waiting there)
-- KEYS[6]  prio HASH (its weight entry is removed)
-- KEYS[7]  review STREAM (optional; with ARGV[2..4])
-- ARGV[1]  dispute id (non-empty string, at most 100 bytes)
-- ARGV[2]  optional: seq of a decision recorded before the cancel but maybe never applied
-- ARGV[3]  optional: its review-stream entry as JSON [f1, v1, ...]
-- ARGV[4]  optional: review stream approximate MAXLEN
--          The entry is XADDed only when the payload exists and its seq is below ARGV[2]
--          (no apply moved it past the decision, so nobody sent that notification): every
--          recorded decision is notified exactly once, even when a cancel lands between
--          record and apply.
-- Returns: 1 = member or payload existed and was removed, 0 = nothing was scheduled
-- Errors:  "EINVAL cancel: <reason>" (nothing written)

local id = ARGV[1]
if type(id) ~= 'string' or #id == 0 or #id > 100 then return redis.error_reply('EINVAL cancel: bad id') end
if string.sub(KEYS[2], -#id) ~= id or string.sub(KEYS[3], -#id) ~= id then
  return redis.error_reply('EINVAL cancel: KEYS do not belong to ' .. id)
end
if ARGV[2] and ARGV[2] ~= '' then
  local nseq = tonumber(ARGV[2])
  local ok, note = pcall(cjson.decode, ARGV[3] or '')
  if nseq == nil or not ok or type(note) ~= 'table' or #note % 2 ~= 0 or not KEYS[7]
      or tonumber(ARGV[4] or '') == nil then
    return redis.error_reply('EINVAL cancel: bad notification')
  end
  local pseq = redis.call('HGET', KEYS[2], 'seq')
  if pseq ~= false and (tonumber(pseq) or 0) < nseq then
    redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[4], '*', unpack(note))
  end
end
local removed = redis.call('ZREM', KEYS[1], id) + redis.call('ZREM', KEYS[5], id)
  + redis.call('DEL', KEYS[2])
redis.call('HDEL', KEYS[6], id)
redis.call('DEL', KEYS[3])
if removed > 0 then
  redis.call('HINCRBY', KEYS[4], 'cancelled', 1)
  return 1
end
return 0
