-- notify_defer.lua: schedule a notification's next delivery attempt (docs/reliability.md).
-- Acknowledges the stream entry (when one is given) and puts the notification into the
-- notify_retry ZSET at its retry time, atomically, so it is never both pending and scheduled.
--
-- KEYS[1]  review STREAM
-- KEYS[2]  notify_retry ZSET (score = retry time, epoch milliseconds)
-- KEYS[3]  notify_data HASH (member -> JSON record)
-- ARGV[1]  consumer group name (used when ARGV[2] is not "")
-- ARGV[2]  stream entry id to XACK, or "" (the notification already came from notify_retry)
-- ARGV[3]  retry member (the notification's idempotency key, prefixed by the group)
-- ARGV[4]  retry time, integer epoch milliseconds
-- ARGV[5]  record, a JSON object (entry fields, attempts, last error)
-- Returns: 1
-- Errors:  "EINVAL notify_defer: <reason>" (nothing written)

local group, entry, member, at, record = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if type(member) ~= 'string' or #member == 0 or #member > 300 then
  return redis.error_reply('EINVAL notify_defer: bad member')
end
if string.match(at or '', '^%d+$') == nil or #at > 16 then
  return redis.error_reply('EINVAL notify_defer: bad retry time')
end
local ok, decoded = pcall(cjson.decode, record or '')
if not ok or type(decoded) ~= 'table' then return redis.error_reply('EINVAL notify_defer: bad record') end
if entry ~= '' then redis.call('XACK', KEYS[1], group, entry) end
redis.call('ZADD', KEYS[2], at, member)
redis.call('HSET', KEYS[3], member, record)
return 1
