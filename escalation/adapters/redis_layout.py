"""The shard count a Redis namespace was laid out with, recorded in Redis and enforced.

A dispute lives in shard ``crc32(id) % shards`` (``redis_keys.shard_of``). A process started
with another ``ESCALATION_SHARDS`` than the one that wrote a namespace would look for every
dispute in the wrong shard: escalations already scheduled would be stranded (never claimed,
"missing" to reconcile) -- a silent re-hash. So the first process to use a namespace records
its shard count in ``escalations:{<namespace>:layout}:shards`` (``SET NX``, no expiry) and
every later one compares: a different count is refused before anything is written.

Changing the shard count is a migration (docs/redis.md, "Changing the number of shards"):
stop every worker, start with a NEW namespace and the new count, run ``escalation reconcile``
(which restores every pending and paused escalation from PostgreSQL into the new shards),
then delete the old namespace's keys.

If Redis loses the record (a failover before it replicated, a flushed server) the next
process records its own count again; whatever the old layout left in Redis is then repaired
from PostgreSQL by ``reconcile`` like any other Redis loss.
"""

from __future__ import annotations

import redis

from escalation.domain.errors import ConfigError


class ShardCountMismatch(ConfigError):
    """The configured shard count differs from the one the namespace was laid out with."""


def layout_key(namespace: str) -> str:
    """Key holding the namespace's shard count (its own hash tag: one slot, any shard count)."""
    return f"escalations:{{{namespace}:layout}}:shards"


def check_shard_count(client: redis.Redis, namespace: str, shards: int) -> int:
    """Record ``shards`` for ``namespace`` if nothing is recorded yet; refuse a mismatch.

    Args:
        client: any Redis client (one server, Cluster or Sentinel primary); two commands.
        shards: the configured shard count (>= 1).

    Returns:
        the recorded shard count (== ``shards``).

    Raises:
        ShardCountMismatch: a different count is recorded (the message names both counts,
            the setting to change and the migration).
        redis.exceptions.RedisError: Redis could not be reached.
    """
    key = layout_key(namespace)
    client.set(key, str(shards), nx=True)
    raw = client.get(key)
    recorded = int(raw) if raw is not None and str(raw).isdigit() else shards
    if recorded != shards:
        raise ShardCountMismatch(
            f"Redis namespace {namespace!r} is laid out in {recorded} shards but "
            f"ESCALATION_SHARDS={shards}: the scheduled escalations would be stranded. "
            f"Set ESCALATION_SHARDS={recorded}, or migrate to {shards} shards under a new "
            f"namespace (docs/operations.md, 'Changing the number of shards')")
    return recorded
