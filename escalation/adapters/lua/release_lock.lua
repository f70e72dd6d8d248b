-- release_lock.lua: compare-and-delete of a lock (the leader lease's release, leader_lease.py).
-- Deletes the lock only while it still holds the caller's value, so a holder whose lock
-- expired cannot release a lock another holder acquired since (GET then DEL, made atomic).
--
-- KEYS[1]  lock STRING (a leader lease: escalations:{ns:s}:leader:<role>)
-- ARGV[1]  expected value: the owner string the lock was set with (non-empty)
-- Returns: 1 = deleted (caller owned it), 0 = absent or owned by someone else (unchanged)
-- Errors:  "EINVAL release_lock: empty owner" (nothing written)

if type(ARGV[1]) ~= 'string' or #ARGV[1] == 0 then
  return redis.error_reply('EINVAL release_lock: empty owner')
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
