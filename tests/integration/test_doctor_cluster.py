"""doctor on a Redis Cluster: the eviction policy is checked on every primary, not one node."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from escalation.adapters.probes import ServerProbe
from escalation.service_layer.doctor import _maxmemory


def test_one_evicting_primary_fails_the_maxmemory_check(
    redis_topology: str, redis_client: redis.Redis, engine: Any
) -> None:
    if redis_topology != "cluster":
        pytest.skip("needs --redis-topology cluster")
    cluster: Any = redis_client
    primaries = cluster.get_primaries()
    assert len(primaries) >= 3
    probe = ServerProbe(redis_client, engine)
    assert _maxmemory(probe).ok
    last = primaries[-1]
    cluster.config_set("maxmemory-policy", "allkeys-lru", target_nodes=last)
    try:
        check = _maxmemory(probe)
    finally:
        cluster.config_set("maxmemory-policy", "noeviction", target_nodes=last)
    assert not check.ok and "allkeys-lru" in check.detail
