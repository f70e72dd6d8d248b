-- pop_if_due.lua: pop the earliest pending member only if it is due (RedisScheduler.pop_if_due).
-- A ZPOPMIN that pushes the member back when it is not due is a race (the member is
-- briefly invisible). Here the check and the pop are one atomic step: a member whose score is
-- later than now is never removed. now = Redis TIME (the one clock). Only the ZSET member is
-- removed; the payload HASH is left to the caller.
--
-- KEYS[1]  pending ZSET (score = due time, epoch milliseconds)
-- ARGV     none
-- Returns: {member, score_ms} when the earliest member has score <= now; nil otherwise
--          (empty ZSET or nothing due).
-- Errors:  none of its own.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[1] == nil or tonumber(first[2]) > now then return nil end
redis.call('ZREM', KEYS[1], first[1])
return {first[1], first[2]}
