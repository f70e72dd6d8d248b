-- includes/fail.lua: fail(msg), the error reply "EINVAL <SCRIPT>: <msg>" a script returns,
-- before it writes anything, when it refuses an argument. SCRIPT is the including script's
-- name: a local it sets before its include line.
local function fail(msg) return redis.error_reply('EINVAL ' .. SCRIPT .. ': ' .. msg) end
