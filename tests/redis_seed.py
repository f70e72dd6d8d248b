"""Single-step Redis operations tests use to set up and inspect a scheduler's state.

The scheduler itself only claims, applies, restores and cancels in whole batches; these
steps (a non-destructive due read, the earliest due time, an atomic pop of the earliest due
member, taking and releasing a dispute's lock by hand) exist so tests can seed contention
and check "nothing is due" without going through a claim. They address the same keys the
scheduler does (``RedisScheduler.keys_for`` / ``shard_keys``) and use Redis ``TIME`` as the
one clock.
"""

from __future__ import annotations

from typing import cast
from uuid import UUID

from escalation.adapters.redis_scheduler import (
    RedisScheduler,
    check_range,
    run_script,
    script_source,
)

POP_IF_DUE_LUA = """\
-- pop the earliest pending member only if it is due. A ZPOPMIN that pushes the member back
-- when it is not due is a race (the member is briefly invisible); here the check and the
-- pop are one atomic step. now = Redis TIME. Only the ZSET member is removed.
--
-- KEYS[1]  pending ZSET (score = due time, epoch milliseconds)
-- ARGV     none
-- Returns: {member, score_ms} when the earliest member has score <= now; nil otherwise.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[1] == nil or tonumber(first[2]) > now then return nil end
redis.call('ZREM', KEYS[1], first[1])
return {first[1], first[2]}
"""


def _redis_now_ms(sched: RedisScheduler) -> int:
    return int(sched.time().timestamp() * 1000)


def fetch_due(sched: RedisScheduler, batch_size: int) -> list[tuple[str, int]]:
    """Up to ``batch_size`` pending members with score <= Redis TIME, read without
    changing anything: ``(dispute id, score epoch ms)`` pairs, earliest first (across
    shards)."""
    check_range("batch_size", batch_size, 1, 500)
    client = sched._client
    now = _redis_now_ms(sched)
    found: list[tuple[str, int]] = []
    for keys in sched.shard_keys():
        rows = client.zrangebyscore(keys.pending, "-inf", now, start=0, num=batch_size,
                                    withscores=True)
        found += [(str(m), int(s)) for m, s in cast(list[tuple[str, float]], rows)]
    return sorted(found, key=lambda pair: pair[1])[:batch_size]


def earliest_due_ms(sched: RedisScheduler) -> int | None:
    """Lowest pending score over all shards (epoch ms), Redis TIME when a ready set holds
    members (they are due), None when nothing is pending."""
    client = sched._client
    best: int | None = None
    for keys in sched.shard_keys():
        if int(client.zcard(keys.ready)):
            return _redis_now_ms(sched)
        rows = cast(list[tuple[str, float]], client.zrange(keys.pending, 0, 0, withscores=True))
        if rows and (best is None or int(rows[0][1]) < best):
            best = int(rows[0][1])
    return best


def pop_if_due(sched: RedisScheduler) -> tuple[str, int] | None:
    """Atomically pop the earliest pending member if it is due (:data:`POP_IF_DUE_LUA`),
    else None. Shards are tried in order; a future member is never removed; the payload
    is kept."""
    script = sched._client.register_script(POP_IF_DUE_LUA)
    for keys in sched.shard_keys():
        raw = run_script(script, [keys.pending], [])
        if raw:
            return str(raw[0]), int(float(raw[1]))
    return None


def try_acquire_lock(sched: RedisScheduler, dispute_id: UUID | str, ttl_ms: int,
                     owner: str) -> bool:
    """``SET lock owner NX PX ttl_ms`` on the dispute's lock key: True if acquired, False if
    someone holds it (a worker's claim then counts the member as contended)."""
    check_range("ttl_ms", ttl_ms, 1, 86_400_000)
    assert owner, "owner must not be empty"
    key = sched.keys_for(dispute_id).lock(dispute_id)
    return bool(sched._client.set(key, owner, nx=True, px=ttl_ms))


def release_lock(sched: RedisScheduler, dispute_id: UUID | str, owner: str) -> bool:
    """Compare-and-delete of the dispute's lock (the package's release_lock.lua, which the
    leader lease uses): True only if ``owner`` held it."""
    assert owner, "owner must not be empty"
    key = sched.keys_for(dispute_id).lock(dispute_id)
    script = sched._client.register_script(script_source("release_lock"))
    return int(run_script(script, [key], [owner])) == 1
