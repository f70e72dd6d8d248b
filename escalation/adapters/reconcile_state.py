"""Adapters of the incremental reconcile (``service_layer.reconcile_incremental``).

* :class:`RedisReconcileState`: the watermark and sweep cursors, one JSON string under
  ``escalations:{ns:layout}:reconcile`` (kept with the schedule it describes: when Redis
  loses its data the state goes too, and the next run is a full one -- what a lost schedule
  needs anyway).
* :class:`PostgresLedgerChanges`: the horizon (database clock or the oldest open transaction's
  start), the disputes with ledger rows recorded in a window, and the sweep's id ranges of
  the projection (primary-key range scans).
* :class:`RedisMemberSweep`: a bounded ZSCAN step over every scheduled ZSET.
* :class:`PostgresProjectionSubset`: the projection against its ledger for named disputes.

The window read scans ``recorded_at``, which has no index: each run reads the ledger's
partitions sequentially (docs/performance.md gives the cost per row).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from itertools import groupby
from typing import cast
from uuid import UUID

import redis
import sqlalchemy as sa

from escalation.adapters.audit_store import escalation_from_state
from escalation.adapters.projection_scan import (
    _SCAN,
    STREAM_ROWS,
    PostgresProjectionLedger,
    ledger_step,
    projection_row,
)
from escalation.adapters.redis_client import identity_key
from escalation.adapters.redis_keys import Keys
from escalation.adapters.tables import LADDER_CHAIN_EVENTS, escalation_state
from escalation.domain.escalation import Escalation, Status
from escalation.domain.projection import ColumnDifference, compare_projection
from escalation.domain.reconcile_sweep import ReconcileState


def state_key(namespace: str) -> str:
    """Key holding the incremental reconcile state of ``namespace`` (JSON)."""
    return f"escalations:{{{namespace}:layout}}:reconcile"


class RedisReconcileState:
    """``ReconcileStateStore`` in Redis.

    Args:
        client: ``redis.Redis`` with ``decode_responses=True``.
        namespace: the key namespace.
    """

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self._client = client
        self._namespace = namespace
        self._key = state_key(namespace)

    def load(self) -> ReconcileState | None:
        """The saved state; None when absent or unreadable (then the next run is full)."""
        raw = self._client.get(self._key)
        if raw is None:
            return None
        try:
            data = json.loads(cast(str, raw))
            watermark = datetime.fromisoformat(data["watermark"]).astimezone(UTC)
            return ReconcileState(
                watermark=watermark, database=data.get("database"),
                sweep_cursor=int(data.get("sweep_cursor", "0"), 16),
                sweep_at_ms=data.get("sweep_at_ms"), lap_started_ms=data.get("lap_started_ms"),
                member_cursors={k: int(v) for k, v in data.get("member_cursors", {}).items()},
                laps=int(data.get("laps", 0)), stream_ms=data.get("stream_ms"))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def save(self, state: ReconcileState) -> None:
        """Write ``state`` (one SET)."""
        self._client.set(self._key, json.dumps({
            "watermark": state.watermark.astimezone(UTC).isoformat(),
            "database": state.database, "sweep_cursor": format(state.sweep_cursor, "x"),
            "sweep_at_ms": state.sweep_at_ms, "lap_started_ms": state.lap_started_ms,
            "member_cursors": state.member_cursors, "laps": state.laps,
            "stream_ms": state.stream_ms}))

    def database_identity(self) -> str | None:
        """The namespace's database identity stamp (``db upgrade``; ADR 0014)."""
        raw = self._client.get(identity_key(self._namespace))
        return None if raw is None else str(raw)

    def now_ms(self) -> int:
        """Redis TIME, epoch milliseconds."""
        seconds, micros = self._client.time()
        return int(seconds) * 1000 + int(micros) // 1000


_HORIZON = sa.text(
    """
    SELECT LEAST(clock_timestamp(), COALESCE(
             (SELECT min(xact_start) FROM pg_stat_activity
               WHERE datname = current_database() AND pid <> pg_backend_pid()
                 AND backend_type = 'client backend' AND xact_start IS NOT NULL),
             'infinity'::timestamptz))
    """
)
_CHANGED = sa.text(
    "SELECT DISTINCT dispute_id FROM escalation_audit "
    "WHERE recorded_at >= :since AND recorded_at < :upto "
    "AND event <> ALL(CAST(:ladder AS text[]))"
)
_S = escalation_state


class PostgresLedgerChanges:
    """``LedgerChanges`` on PostgreSQL.

    Args:
        engine: a psycopg 3 engine on a database at the Alembic head.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def horizon(self) -> datetime:
        """min(``clock_timestamp()``, the oldest open transaction's ``xact_start`` in this
        database): no row with an earlier ``recorded_at`` can still commit. Aware UTC."""
        with self._engine.connect() as conn:
            value = conn.execute(_HORIZON).scalar_one()
        return cast(datetime, value).astimezone(UTC)

    def changed_since(self, since: datetime, upto: datetime,
                      chunk: int) -> Iterator[list[UUID]]:
        """Distinct dispute ids with a ledger row recorded in [since, upto) (ladder chains
        left out), streamed through a server-side cursor in chunks of ``chunk``."""
        with self._engine.connect() as conn:
            result = conn.execution_options(yield_per=max(chunk, 100)).execute(
                _CHANGED, {"since": since, "upto": upto, "ladder": list(LADDER_CHAIN_EVENTS)})
            try:
                for part in result.partitions(chunk):
                    yield [r[0] for r in part]
            finally:
                result.close()  # the server-side cursor, also when the caller stops early

    def pending_range(self, low: int, high: int, limit: int) -> Iterator[list[Escalation]]:
        """Pending and paused escalations with ``low`` <= id < ``high`` (ids as 128-bit
        integers), ascending, in keyset pages of ``limit``."""
        # no upper bound in the query: ordered by the primary key with a LIMIT, each page
        # is an index range read that stops after ``limit`` rows (an upper bound made the
        # planner read the whole remaining range for every page); the last page is cut here
        after: UUID | None = None
        first = UUID(int=low)
        statuses = [Status.PENDING.value, Status.PAUSED.value]
        while True:
            stmt = sa.select(_S).where(_S.c.status.in_(statuses))
            stmt = (stmt.where(_S.c.dispute_id > after) if after is not None
                    else stmt.where(_S.c.dispute_id >= first))
            with self._engine.connect() as conn:
                rows = [escalation_from_state(r) for r in
                        conn.execute(stmt.order_by(_S.c.dispute_id).limit(limit)).mappings()]
            inside = [e for e in rows if e.dispute_id.int < high]
            if inside:
                yield inside
            if len(rows) < limit or len(inside) < len(rows):
                return
            after = rows[-1].dispute_id


class RedisMemberSweep:
    """``MemberSweep`` over the pending and ready ZSETs of every shard.

    Args:
        client: ``redis.Redis`` with ``decode_responses=True``.
        namespace / shards: as the scheduler's.
    """

    MIN_STEP = 100
    """Members read per ZSET per run at least (a small ZSET is read whole at once)."""

    def __init__(self, client: redis.Redis, namespace: str, shards: int = 1) -> None:
        self._client = client
        self._keys = [k for s in range(shards)
                      for k in (Keys(namespace, s).pending, Keys(namespace, s).ready)]
        self._streams = [Keys(namespace, s).review for s in range(shards)]

    def notified_since(self, since_ms: int, upto_ms: int,
                       chunk: int) -> Iterator[list[str]]:
        """Dispute ids named by review-stream entries with ids in [since_ms, upto_ms]
        (epoch ms, every shard), in chunks of at most ``chunk`` (XRANGE pages)."""
        for stream in self._streams:
            start = str(max(since_ms, 0))
            while True:
                page = cast(list[tuple[str, dict[str, str] | None]],
                            self._client.xrange(stream, start, str(upto_ms), count=chunk))
                ids = sorted({str((f or {}).get("dispute_id", "")) for _, f in page} - {""})
                if ids:
                    yield ids
                if len(page) < chunk:
                    break
                start = "(" + str(page[-1][0])

    def sweep_members(self, cursors: dict[str, int],
                      fraction: float) -> tuple[list[str], dict[str, int], bool]:
        """ZSCAN each ZSET from its cursor until about ``fraction`` x ZCARD members (at
        least :attr:`MIN_STEP`) were read or it wrapped; a wrapped ZSET stays at cursor 0
        until every one has wrapped (then all start again)."""
        members: list[str] = []
        nxt = dict(cursors)
        done = {k for k, v in cursors.items() if v == -1}
        for key in self._keys:
            if key in done:
                continue
            budget = max(self.MIN_STEP, math.ceil(int(self._client.zcard(key)) * fraction))
            cursor, read = max(0, cursors.get(key, 0)), 0
            while read < budget:
                cursor, page = self._client.zscan(key, cursor, count=min(budget, 1000))
                members += [str(m) for m, _ in page]
                read += len(page)
                if cursor == 0:
                    break
            nxt[key] = -1 if cursor == 0 else int(cursor)
        wrapped = all(nxt.get(k) == -1 for k in self._keys)
        return members, ({} if wrapped else nxt), wrapped


_SUBSET = sa.text(
    str(_SCAN.text)
    .replace("WHERE (CAST(:id AS uuid) IS NULL OR s.dispute_id = CAST(:id AS uuid))",
             "WHERE s.dispute_id = ANY(CAST(:ids AS uuid[]))")
    # a lateral read per dispute: each ledger partition is read by its primary key (and
    # pruned by chain_created_at) instead of joined whole
    .replace("JOIN escalation_audit AS a\n        ON a.dispute_id = s.dispute_id "
             "AND a.chain_created_at = s.created_at",
             "CROSS JOIN LATERAL (SELECT * FROM escalation_audit AS x "
             "WHERE x.dispute_id = s.dispute_id AND x.chain_created_at = s.created_at "
             "ORDER BY x.seq OFFSET 0) AS a"))
if ":ids" not in str(_SUBSET.text) or "LATERAL" not in str(_SUBSET.text):
    raise RuntimeError("the projection scan query changed: update reconcile_state._SUBSET")


class PostgresProjectionSubset:
    """``ProjectionSubset``: the projection scan of ``projection_scan`` for named disputes.

    Args:
        engine: a psycopg 3 engine on a database at the Alembic head.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._ledger = PostgresProjectionLedger(engine)

    def differences_of(self, dispute_ids: Sequence[UUID],
                       ) -> Iterator[tuple[UUID, tuple[ColumnDifference, ...]]]:
        """``(dispute_id, differing columns)`` of each named dispute whose projection row
        differs from its ledger, in one REPEATABLE READ snapshot."""
        if not dispute_ids:
            return
        ctx = self._engine.connect().execution_options(isolation_level="REPEATABLE READ")
        with ctx as conn, conn.begin():
            rows = conn.execute(_SUBSET.execution_options(yield_per=STREAM_ROWS),
                                {"ids": list(dispute_ids)}).mappings()
            try:
                for did, group in groupby(rows, key=lambda r: r["dispute_id"]):
                    chain = list(group)
                    found = compare_projection(projection_row(chain[0]),
                                               [ledger_step(r) for r in chain])
                    if found:
                        yield did, found
            finally:
                rows.close()  # the server-side cursor, also when the caller stops early

    def repair(self, dispute_id: UUID) -> tuple[ColumnDifference, ...]:
        """``PostgresProjectionLedger.repair``."""
        return self._ledger.repair(dispute_id)
