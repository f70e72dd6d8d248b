-- notify_claim_retry.lua: claim notifications whose retry time has come (docs/reliability.md).
-- now = Redis TIME; up to ARGV[1] members with score <= now are re-scored to now + ARGV[2]
-- (visibility timeout: a consumer that crashes mid-delivery leaves the notification to come
-- due again by itself) and returned with their records.
--
-- KEYS[1]  notify_retry ZSET (score = retry time, epoch milliseconds)
-- KEYS[2]  notify_data HASH
-- ARGV[1]  limit, integer 1..1000
-- ARGV[2]  lease, integer milliseconds 1..86400000
-- Returns: {now_ms, {member1, record1}, {member2, record2}, ...}; a member whose record is
--          missing is removed and not returned
-- Errors:  "EINVAL notify_claim_retry: <reason>"

local limit, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
if limit == nil or limit < 1 or limit > 1000 or limit ~= math.floor(limit) then
  return redis.error_reply('EINVAL notify_claim_retry: bad limit')
end
if lease == nil or lease < 1 or lease > 86400000 or lease ~= math.floor(lease) then
  return redis.error_reply('EINVAL notify_claim_retry: bad lease')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit)
local out = {now}
for _, m in ipairs(due) do
  local rec = redis.call('HGET', KEYS[2], m)
  if rec then
    redis.call('ZADD', KEYS[1], now + lease, m)
    table.insert(out, {m, rec})
  else
    redis.call('ZREM', KEYS[1], m)
  end
end
return out
