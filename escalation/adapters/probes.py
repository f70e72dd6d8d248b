"""Direct questions to the servers: for ``escalation doctor`` (implements the service layer's
``doctor.ServerProbe``) their clocks, Redis's eviction policy and PostgreSQL's replication;
for ``/readyz`` (``ports.ReadinessProbe``) whether both answer and the schema is at head.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
import sqlalchemy as sa

from escalation.adapters.db import check_at_head
from escalation.adapters.redis_client import is_cluster
from escalation.adapters.redis_policy import eviction_policy
from escalation.domain.errors import SchemaNotAtHead
from escalation.ports.readiness import BackingServers, ServerCheck, ServerFault


class ServerProbe:
    """Clock and configuration reads of one Redis client and one PostgreSQL engine."""

    def __init__(self, client: redis.Redis, engine: sa.Engine) -> None:
        self._client = client
        self._engine = engine

    def clocks_ms(self) -> tuple[int, int]:
        """(Redis ``TIME``, PostgreSQL ``clock_timestamp()``), epoch milliseconds, read in
        that order."""
        seconds, micros = self._client.time()
        redis_ms = int(seconds) * 1000 + int(micros) // 1000
        with self._engine.connect() as conn:
            db = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
        return redis_ms, int(db.timestamp() * 1000)

    def maxmemory_policy(self) -> str | None:
        """Redis ``maxmemory-policy`` from ``INFO memory`` or else ``CONFIG GET``; None when
        both are refused (``adapters.redis_policy.eviction_policy``). On a Redis Cluster: the
        distinct values over every primary, comma-separated (one evicting primary loses its
        shards' schedule)."""
        if is_cluster(self._client):
            cluster: Any = self._client  # a RedisCluster: one CONFIG GET per primary
            try:
                values = {str(cluster.config_get("maxmemory-policy", target_nodes=node)
                              .get("maxmemory-policy", "unknown"))
                          for node in cluster.get_primaries()}
            except redis.ResponseError:
                return None
            return ",".join(sorted(values))
        return eviction_policy(self._client)

    def replication(self) -> dict[str, Any] | None:
        """``in_recovery``, ``synchronous_standby_names`` and ``standbys``
        (``[(application_name, sync_state)]`` of ``pg_stat_replication``: the standbys
        streaming from this server); None when the server refuses the reads."""
        try:
            with self._engine.connect() as conn:
                in_recovery = bool(conn.execute(sa.text("SELECT pg_is_in_recovery()"))
                                   .scalar_one())
                names = str(conn.execute(sa.text("SHOW synchronous_standby_names"))
                            .scalar_one())
                rows = conn.execute(sa.text(
                    "SELECT application_name, sync_state FROM pg_stat_replication "
                    "ORDER BY application_name")).all()
        except sa.exc.DBAPIError:
            return None
        return {"in_recovery": in_recovery, "synchronous_standby_names": names,
                "standbys": [(str(r[0]), str(r[1] or "unknown")) for r in rows]}


class ReadinessChecks:
    """``ports.ReadinessProbe`` on one Redis client and one PostgreSQL engine: a ``PING``,
    then the Alembic revision (``adapters.db.check_at_head``)."""

    def __init__(self, client: redis.Redis, engine: sa.Engine) -> None:
        self._client = client
        self._engine = engine

    def check(self) -> BackingServers:
        """Redis, then PostgreSQL; a server that does not answer is a fault, not an error."""
        return BackingServers(
            redis_check=_answered(self._client.ping),
            postgres_check=_answered(lambda: check_at_head(self._engine)))


def _answered(call: Callable[[], object]) -> ServerCheck:
    """Run ``call``; what it raises as a :class:`ServerFault` (a timeout when the exception
    is a ``TimeoutError`` or its class name says timeout; any other one is unreachable)."""
    try:
        call()
    except SchemaNotAtHead:
        return ServerCheck(ServerFault.SCHEMA_NOT_AT_HEAD)
    except Exception as exc:  # any driver failure: the probe reports, never raises
        first = (str(exc).strip().splitlines() or [""])[0]
        timed_out = isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower()
        return ServerCheck(ServerFault.TIMEOUT if timed_out else ServerFault.UNREACHABLE,
                           f"{type(exc).__name__}: {first}")
    return ServerCheck()
