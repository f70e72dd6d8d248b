"""The namespace's operational counters in Redis (``ports.StatsCounter``).

One HASH per namespace on shard 0, ``escalations:{ns:0}:stats`` (the scheduler's
``stats()`` reads it; the API's ``/metrics`` reports it): counters written outside a Lua
script, e.g. the worker's ``lease_expired`` (claims of a member whose lease had expired).
"""

from __future__ import annotations

import redis

from escalation.adapters.redis_keys import Keys


class RedisStatsCounter:
    """``ports.StatsCounter`` on the stats HASH of ``namespace``'s shard 0.

    Args:
        client: Redis client (one server, Cluster or Sentinel primary).
        namespace: the scheduler namespace.
    """

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self._client = client
        self.key = Keys(namespace, 0).stats

    def add(self, name: str, amount: int) -> None:
        """HINCRBY the counter ``name`` by ``amount`` (one round trip)."""
        self._client.hincrby(self.key, name, amount)
