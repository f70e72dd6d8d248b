"""Redis eviction policy: refuse a server that may evict our keys.

Redis with ``maxmemory`` set evicts keys under memory pressure unless ``maxmemory-policy`` is
``noeviction`` (https://redis.io/docs/latest/develop/reference/eviction/). Every other policy
may drop schedule state: ``allkeys-*`` any key (pending members, payloads, the review stream),
``volatile-*`` keys with a TTL (our leases, i.e. the locks that make a claim exclusive). An
evicted member or payload is repaired only after the fact by ``escalation reconcile``; an
evicted lock lets two workers hold one escalation. So workers, ``enqueue`` and ``import``
refuse such a server unless ``ESCALATION_ALLOW_EVICTING_REDIS=true``, which is logged at
error level on every start.

The policy is read from ``INFO memory`` (``maxmemory_policy``; allowed on most managed
services) and, failing that, ``CONFIG GET``; when both are refused it is unknown, which is
refused too (it may evict).
"""

from __future__ import annotations

import redis
import structlog

from escalation.domain.errors import ConfigError

SAFE_POLICY = "noeviction"
OVERRIDE_ENV = "ESCALATION_ALLOW_EVICTING_REDIS"

log = structlog.get_logger("escalation.redis")


def eviction_policy(client: redis.Redis) -> str | None:
    """The server's ``maxmemory-policy``, or None when INFO and CONFIG GET are both refused."""
    try:
        info = client.info("memory")
        policy = info.get("maxmemory_policy")
        if policy:
            return str(policy)
    except redis.ResponseError:
        pass
    try:
        got = client.config_get("maxmemory-policy").get("maxmemory-policy")
        return str(got) if got else None
    except redis.ResponseError:
        return None


def refuse_evicting_redis(client: redis.Redis, *, allow: bool) -> str | None:
    """Raise unless the server cannot evict keys (or ``allow``, then log loudly).

    Returns:
        the policy found (None = unknown).

    Raises:
        ConfigError: the policy is not ``noeviction`` (or unknown) and ``allow`` is false.
    """
    policy = eviction_policy(client)
    if policy == SAFE_POLICY:
        return policy
    shown = policy or "unknown (INFO and CONFIG GET refused)"
    if allow:
        log.error("redis.eviction_policy_overridden", maxmemory_policy=shown,
                  detail=f"{OVERRIDE_ENV} is set: this Redis may evict schedule keys and lock "
                  "leases; run `escalation reconcile` regularly and expect repairs")
        return policy
    raise ConfigError(
        f"Redis maxmemory-policy is {shown}: it may evict schedule keys and leases; set "
        f"maxmemory-policy {SAFE_POLICY} (or, knowingly, {OVERRIDE_ENV}=true)"
    )
