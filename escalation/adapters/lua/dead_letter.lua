-- dead_letter.lua: move a poison escalation or an undeliverable notification to the dead-letter
-- set after bounded attempts, for inspection (docs/reliability.md, "Dead letters").
-- kind "decision": refused while another fencing token holds the lock (the lease ended and
--   another worker claimed the member); allowed when the caller's token holds it or no lock does;
--   ZREM the pending member, DEL its lock, HDEL its failure counter; the payload HASH is kept
--   so `dead retry` can put it back. With KEYS[8..9] (ready set, ADR 0006) the member is also
--   ZREMed from ready (a member whose lease ran out waits there once due again) and its prio
--   weight HDELed; the weight is kept in the record as "prio_weight" so `dead retry` restores
--   it. kind "notify": ZREM + HDEL the retry entry.
-- Then ZADD dead <Redis TIME ms> member and HSET dead_data member record.
--
-- KEYS[1]  dead ZSET (score = dead-lettered time, epoch milliseconds)
-- KEYS[2]  dead_data HASH (member -> JSON record)
-- KEYS[3]  pending ZSET
-- KEYS[4]  lock STRING of the dispute (decision) -- any key of the shard for notify
-- KEYS[5]  decision_failures HASH
-- KEYS[6]  notify_retry ZSET
-- KEYS[7]  notify_data HASH
-- KEYS[8]  ready ZSET (optional; ADR 0006)    KEYS[9]  prio HASH (optional, with KEYS[8])
-- ARGV[1]  dead member ("decision:<dispute id>" or "notify:<idempotency key>"), 1..200 bytes
-- ARGV[2]  record, a JSON object
-- ARGV[3]  kind: "decision" | "notify"
-- ARGV[4]  dispute id (pending member / failure counter field), or "" for notify
-- ARGV[5]  fencing token that must hold the lock (decimal), or "" (no ownership check)
-- ARGV[6]  notify_retry member to remove, or ""
-- Returns: dead-lettered time (epoch ms) on success; 0 = refused (lock held by another token)
-- Errors:  "EINVAL dead_letter: <reason>" (nothing written)

local member, record, kind, id, token, rmember = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
if type(member) ~= 'string' or #member == 0 or #member > 200 then
  return redis.error_reply('EINVAL dead_letter: bad member')
end
local ok, decoded = pcall(cjson.decode, record or '')
if not ok or type(decoded) ~= 'table' then return redis.error_reply('EINVAL dead_letter: record is not JSON') end
if kind ~= 'decision' and kind ~= 'notify' then return redis.error_reply('EINVAL dead_letter: bad kind') end
if kind == 'decision' and (id == nil or #id == 0) then return redis.error_reply('EINVAL dead_letter: no id') end
if token ~= '' and string.match(token, '^%d+$') == nil then return redis.error_reply('EINVAL dead_letter: bad token') end
if #KEYS ~= 7 and #KEYS ~= 9 then return redis.error_reply('EINVAL dead_letter: expected 7 or 9 KEYS') end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if kind == 'decision' then
  if token ~= '' then
    local lockval = redis.call('GET', KEYS[4])
    local locktok = lockval and string.match(lockval, '^(%d+):') or nil
    if lockval and locktok ~= token then return 0 end
  end
  redis.call('ZREM', KEYS[3], id)
  redis.call('DEL', KEYS[4])
  redis.call('HDEL', KEYS[5], id)
  if #KEYS == 9 then
    redis.call('ZREM', KEYS[8], id)
    local w = redis.call('HGET', KEYS[9], id)
    if w then
      decoded.prio_weight = tonumber(w)
      record = cjson.encode(decoded)
      redis.call('HDEL', KEYS[9], id)
    end
  end
end
if rmember ~= '' then
  redis.call('ZREM', KEYS[6], rmember)
  redis.call('HDEL', KEYS[7], rmember)
end
redis.call('ZADD', KEYS[1], now, member)
redis.call('HSET', KEYS[2], member, record)
return now
