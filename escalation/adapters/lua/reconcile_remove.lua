-- reconcile_remove.lua: remove a ZSET member PostgreSQL says should not be pending
-- (reconcile, docs/architecture.md "Where the truth lives"). Seq-guarded and lock-aware,
-- so it is safe alongside live workers: a locked member is left alone, and a payload newer than
-- the PostgreSQL state read by the caller is never touched. A member may sit in pending or,
-- once due and promoted by a claim, in ready (ADR 0006): both count as scheduled and both are
-- cleared; mode "remove" also HDELs its prio weight ("unpark" keeps it for the resume).
--
-- KEYS[1]  pending ZSET (score = due time, epoch milliseconds)
-- KEYS[2]  payload HASH of the member
-- KEYS[3]  lock STRING of the member
-- KEYS[4]  ready ZSET (ADR 0006)
-- KEYS[5]  prio HASH (member -> weight)
-- ARGV[1]  member (dispute id), 1..100 bytes; KEYS[2] and KEYS[3] must end with it
-- ARGV[2]  sequence number recorded in PostgreSQL (decimal integer), or "-1" when PostgreSQL
--          has no escalation for the member (unknown)
-- ARGV[3]  mode: "remove" (terminal / cancelled / unknown: ZREM + DEL payload),
--          "unpark" (paused: ZREM only, the payload is kept) or "reset" (Redis ahead of
--          the ledger, ADR 0014: ZREM + DEL payload + HDEL prio whatever the payload's seq,
--          also when the member is in neither ZSET; the caller then restores the ledger's
--          state)
-- Returns: "removed" | "locked" (lock held: unchanged) | "ahead" (payload seq > ARGV[2]:
--          unchanged; never in mode "reset") | "absent" (member not in the ZSET: unchanged;
--          never in mode "reset") | "behind" (unpark only: payload seq < ARGV[2], left for
--          restore to re-apply the paused state)
-- Errors:  "EINVAL reconcile_remove: <reason>" (nothing written)

local member, seq, mode = ARGV[1], ARGV[2], ARGV[3]
if type(member) ~= 'string' or #member == 0 or #member > 100 then
  return redis.error_reply('EINVAL reconcile_remove: bad member')
end
if string.sub(KEYS[2], -#member) ~= member or string.sub(KEYS[3], -#member) ~= member then
  return redis.error_reply('EINVAL reconcile_remove: KEYS do not belong to member')
end
if seq ~= '-1' and (string.match(seq or '', '^%d+$') == nil or #seq > 16) then
  return redis.error_reply('EINVAL reconcile_remove: bad seq')
end
if mode ~= 'remove' and mode ~= 'unpark' and mode ~= 'reset' then
  return redis.error_reply('EINVAL reconcile_remove: bad mode')
end
if #KEYS ~= 5 then return redis.error_reply('EINVAL reconcile_remove: expected 5 KEYS') end
if mode == 'reset' then
  if redis.call('EXISTS', KEYS[3]) == 1 then return 'locked' end
  redis.call('ZREM', KEYS[1], member)
  redis.call('ZREM', KEYS[4], member)
  redis.call('DEL', KEYS[2])
  redis.call('HDEL', KEYS[5], member)
  return 'removed'
end
if redis.call('ZSCORE', KEYS[1], member) == false and redis.call('ZSCORE', KEYS[4], member) == false then
  return 'absent'
end
if redis.call('EXISTS', KEYS[3]) == 1 then return 'locked' end
local pseq = redis.call('HGET', KEYS[2], 'seq')
if pseq and seq ~= '-1' and tonumber(pseq) > tonumber(seq) then return 'ahead' end
if mode == 'unpark' and pseq and tonumber(pseq) < tonumber(seq) then return 'behind' end
redis.call('ZREM', KEYS[1], member)
redis.call('ZREM', KEYS[4], member)
if mode == 'remove' then
  redis.call('DEL', KEYS[2])
  redis.call('HDEL', KEYS[5], member)
end
return 'removed'
