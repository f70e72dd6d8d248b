-- warn_claim.lua: take the pre-breach warnings that are due on one shard (RedisWarnings.claim;
-- docs/sla.md "Warnings before breach"). now = Redis TIME (the one clock, ADR 0005); up to
-- max_items members with score <= now are removed from the warnings ZSET and returned,
-- earliest first. Each member is handed out once (ZREM in the same script); the caller
-- records it in PostgreSQL with a compare-and-set on the dispute's seq and a unique key, so a
-- warning is never recorded twice.
--
-- KEYS[1]   warnings ZSET (member "<dispute id>:<seq>:<fraction>", score = warning time, epoch ms)
-- ARGV[1]   max_items: integer 1..1000
-- Returns:  {now_ms, {member_1, score_1, member_2, score_2, ...}, next_ms}
--           next_ms = score of the earliest member left after the claim (epoch ms), or -1 when
--           none is left (the worker sleeps on it instead of polling every loop)
-- Errors:   "EINVAL warn_claim: <reason>" (nothing written)

local SCRIPT = 'warn_claim'
-- @include "fail"
local max_items = ARGV[1]
if #KEYS ~= 1 then return fail('expected 1 KEY') end
if type(max_items) ~= 'string' or not string.match(max_items, '^%d+$') or #max_items > 4
    or tonumber(max_items) < 1 or tonumber(max_items) > 1000 then
  return fail('max_items must be an integer 1..1000')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(max_items))
for i = 1, #due, 2 do redis.call('ZREM', KEYS[1], due[i]) end
local left = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local next_ms = -1
if left[2] then next_ms = tonumber(left[2]) end
return {now, due, next_ms}
