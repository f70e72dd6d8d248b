"""Read-only reads of the console's ladders and operations pages (implements
``escalation.ports.ConsoleOpsReads``; built by ``bootstrap.console_ops_for``).

PostgreSQL: the ladder releases and ``ladder apply`` runs (through
``adapters.ladder_history.LadderHistoryStore``), the ``maintenance_runs`` rows.
Redis (per shard of the namespace, ``adapters.redis_keys``): ZCARD of pending, ready and
dead, ZCOUNT of pending due at Redis TIME, the earliest due member (a claim re-scores its
member to now + lease, so a pending member due now is not claimed; a ready member's due is
its score + weight x aging), the lock keys (``"<fencing token>:<worker id>"`` with their
PTTL) and the maintenance leader lease's PTTL. Nothing is written.

Workers keep no heartbeat: a worker shows here only while it holds a claim.
"""

from __future__ import annotations

from typing import Any, cast

import redis
import sqlalchemy as sa

from escalation.adapters.audit_store import utc
from escalation.adapters.ladder_history import LadderHistoryStore
from escalation.adapters.leader_lease import LEADER_NAME
from escalation.adapters.redis_keys import Keys
from escalation.ports import (
    HeldClaim,
    HistoryRow,
    MaintenanceRunRow,
    OpsSnapshot,
    ReleaseRow,
    ShardDepth,
)

READY_LOOKED_AT = 1000
"""A shard's best-scored ready members read to find the earliest due (as ``status`` does)."""
MAX_CLAIMS = 500
"""At most this many held claims are listed (the count per shard is exact)."""


class ConsoleOpsStore:
    """``ConsoleOpsReads`` over ``engine`` and the namespace's shards on ``client``.

    Args:
        engine: a psycopg 3 engine on a database at the Alembic head.
        client: the Redis client (one server, Cluster or Sentinel).
        namespace: the deployment's namespace.
        shards: the namespace's shard count (>= 1).
        aging_ms: the priority aging of the ready set (``priority_aging_s`` x 1000).
    """

    def __init__(self, engine: sa.Engine, client: redis.Redis, namespace: str, shards: int,
                 aging_ms: int) -> None:
        self._engine, self._client = engine, client
        self._namespace, self._shards, self._aging_ms = namespace, shards, aging_ms
        self._history = LadderHistoryStore(engine)

    # ------------------------------------------------------------------ PostgreSQL
    def releases(self) -> dict[tuple[str, int], ReleaseRow]:
        """See ``ConsoleOpsReads.releases``."""
        return self._history.releases()

    def apply_runs(self) -> list[HistoryRow]:
        """See ``ConsoleOpsReads.apply_runs`` (newest first)."""
        return list(reversed(self._history.history()))

    def maintenance_runs(self) -> list[MaintenanceRunRow]:
        """See ``ConsoleOpsReads.maintenance_runs``."""
        with self._engine.connect() as conn:
            rows = conn.execute(sa.text(
                "SELECT job, last_occurrence, last_run_at, last_status, runs, missed, "
                "last_leader, details FROM maintenance_runs ORDER BY job")).mappings().all()
        return [MaintenanceRunRow(r["job"], utc(r["last_occurrence"]), utc(r["last_run_at"]),
                                  r["last_status"], int(r["runs"]), int(r["missed"]),
                                  r["last_leader"], dict(r["details"] or {}))
                for r in rows]

    # ------------------------------------------------------------------ Redis
    def _now_ms(self) -> int:
        reply: Any = self._client.time()
        seconds, micros = reply
        return int(seconds) * 1000 + int(micros) // 1000

    def snapshot(self) -> OpsSnapshot:
        """See ``ConsoleOpsReads.snapshot``. Not one atomic read: each shard is read in
        turn (the figures of a busy namespace move while they are read)."""
        now = self._now_ms()
        shards: list[ShardDepth] = []
        claims: list[HeldClaim] = []
        for shard in range(self._shards):
            keys = Keys(self._namespace, shard)
            locks = sorted(str(k) for k in self._client.scan_iter(
                match=f"{keys.lock_prefix}*", count=1000))
            shards.append(self._depth(keys, now, len(locks)))
            claims += self._claims(keys, locks[:max(0, MAX_CLAIMS - len(claims))])
        lease: Any = self._client.pttl(Keys(self._namespace, 0).leader(LEADER_NAME))
        ttl = int(lease)
        return OpsSnapshot(now, tuple(shards), tuple(claims), ttl if ttl >= 0 else None)

    def _depth(self, keys: Keys, now: int, claimed: int) -> ShardDepth:
        pipe = self._client.pipeline(transaction=False)
        pipe.zcard(keys.pending)
        pipe.zcount(keys.pending, "-inf", now)
        pipe.zcard(keys.ready)
        pipe.zcard(keys.dead)
        pipe.zrange(keys.pending, 0, 0, withscores=True)
        pipe.zrange(keys.ready, 0, READY_LOOKED_AT - 1, withscores=True)
        replies: list[Any] = pipe.execute()
        pending, due, ready, dead, first, ready_rows = replies
        dues = [int(first[0][1])] if first and int(first[0][1]) <= now else []
        if ready_rows:
            weights = cast(list[str | None], self._client.hmget(
                keys.prio, [m for m, _ in ready_rows]))
            dues += [int(sc) + int(w or 0) * self._aging_ms
                     for (_, sc), w in zip(ready_rows, weights, strict=True)]
        return ShardDepth(keys.shard, int(pending), int(due) + int(ready), int(ready), claimed,
                          int(dead), min(dues) if dues else None)

    def _claims(self, keys: Keys, locks: list[str]) -> list[HeldClaim]:
        if not locks:
            return []
        pipe = self._client.pipeline(transaction=False)
        for key in locks:
            pipe.get(key)
            pipe.pttl(key)
        replies: list[Any] = pipe.execute()
        out: list[HeldClaim] = []
        for i, key in enumerate(locks):
            value, ttl = replies[2 * i], replies[2 * i + 1]
            if value is None:  # released between SCAN and GET
                continue
            text = value.decode() if isinstance(value, bytes) else str(value)
            token, _, worker = text.partition(":")
            out.append(HeldClaim(keys.shard, key[len(keys.lock_prefix):], worker,
                                 int(token) if token.isdigit() else 0, int(ttl)))
        return out
