-- leader_renew.lua: renew a leader lease only while it still holds the caller's token
-- (compare-and-pexpire; the maintenance leader lease, docs/reliability.md).
--
-- KEYS[1]  leader STRING (value = token)
-- ARGV[1]  token (non-empty)
-- ARGV[2]  lease, integer milliseconds 1..86400000
-- Returns: 1 = renewed; 0 = the lease is gone or held by another token (caller is not leader)
-- Errors:  "EINVAL leader_renew: <reason>"

if type(ARGV[1]) ~= 'string' or #ARGV[1] == 0 then
  return redis.error_reply('EINVAL leader_renew: empty token')
end
local ttl = tonumber(ARGV[2])
if ttl == nil or ttl < 1 or ttl > 86400000 or ttl ~= math.floor(ttl) then
  return redis.error_reply('EINVAL leader_renew: bad lease')
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ttl)
end
return 0
