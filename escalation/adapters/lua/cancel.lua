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
-- ARGV[1]  dispute id (non-empty string, at most 100 bytes)
-- Returns: 1 = member or payload existed and was removed, 0 = nothing was scheduled
-- Errors:  "EINVAL cancel: <reason>" (nothing written)

local id = ARGV[1]
if type(id) ~= 'string' or #id == 0 or #id > 100 then return redis.error_reply('EINVAL cancel: bad id') end
if string.sub(KEYS[2], -#id) ~= id or string.sub(KEYS[3], -#id) ~= id then
  return redis.error_reply('EINVAL cancel: KEYS do not belong to ' .. id)
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
