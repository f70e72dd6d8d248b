"""Search and streaming reads of the ledger (implements ``escalation.ports.LedgerSearch``).

``stream`` uses a server-side cursor (``stream_results`` + ``yield_per``) in one
REPEATABLE READ snapshot, so an export's memory stays constant whatever the row count.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from escalation.adapters.audit_store import ledger_row
from escalation.adapters.tables import LEDGER_EVENTS, escalation_audit
from escalation.domain.timeutil import require_aware
from escalation.ports import AuditFilter, LedgerRow

_A = escalation_audit
_ORDER = (_A.c.decided_at, _A.c.dispute_id, _A.c.seq)


def decision_branches(decision: str) -> list[sa.ColumnElement[bool]]:
    """The rows a decision filter matches (their event or their ``match_decision`` is
    ``decision``) as disjoint conditions, each an ordered range of one index (migration
    0021): ``event = decision`` (only for a ledger event's name: the ``event_known``
    constraint allows no other) and ``match_decision = decision`` on the rows whose decision
    differs from their event. Searched apart and merged by ``decided_at``, a rare decision
    is found without walking every partition."""
    branches: list[sa.ColumnElement[bool]] = []
    if decision in LEDGER_EVENTS:
        branches.append(_A.c.event == decision)
    branches.append(sa.and_(_A.c.match_decision == decision,
                            _A.c.match_decision != _A.c.event))
    return branches


def conditions(flt: AuditFilter) -> list[sa.ColumnElement[bool]]:
    """SQLAlchemy conditions for ``flt``. Raises InvalidInput for naive times."""
    conds: list[sa.ColumnElement[bool]] = []
    if flt.dispute_id is not None:
        conds.append(_A.c.dispute_id == flt.dispute_id)
    if flt.tier is not None:
        conds.append(sa.or_(_A.c.from_tier == flt.tier, _A.c.to_tier == flt.tier))
    if flt.decision is not None:
        conds.append(sa.or_(*decision_branches(flt.decision)))
    if flt.since is not None:
        conds.append(_A.c.decided_at >= require_aware(flt.since, "from"))
    if flt.until is not None:
        conds.append(_A.c.decided_at < require_aware(flt.until, "to"))
    if flt.actor is not None:
        conds.append(_A.c.actor == flt.actor)
    if flt.ladder is not None:
        conds.append(_A.c.ladder == flt.ladder)
    if flt.ladder_version is not None:
        conds.append(_A.c.ladder_version == flt.ladder_version)
    return conds


class PostgresLedgerSearch:
    """The ``LedgerSearch`` port on PostgreSQL.

    Args:
        engine: a psycopg 3 engine on a database at the Alembic head.
        batch: rows fetched per round trip while streaming.
    """

    def __init__(self, engine: sa.Engine, batch: int = 2000) -> None:
        self._engine = engine
        self._batch = batch

    def ledger_events(self) -> frozenset[str]:
        """``tables.LEDGER_EVENTS``."""
        return frozenset(LEDGER_EVENTS)

    def recorded_decisions(self) -> list[str]:
        """Every distinct ``match_decision`` of the ledger."""
        with self._engine.connect() as conn:
            return list(conn.execute(sa.select(_A.c.match_decision).distinct()).scalars())

    def search(self, flt: AuditFilter, limit: int,
               after: tuple[datetime, UUID, int] | None = None) -> list[LedgerRow]:
        """Rows matching ``flt`` in (decided_at, dispute_id, seq) order, at most ``limit``;
        with ``after``, only rows whose (decided_at, dispute_id, seq) is greater (keyset)."""
        conds = conditions(dataclasses.replace(flt, decision=None))
        if after is not None:
            at, did, seq = after
            conds.append(sa.tuple_(*_ORDER)
                         > sa.tuple_(sa.literal(at), sa.literal(did), sa.literal(seq)))
        queries = _branches([c.name for c in _A.c], flt.decision, conds)
        with self._engine.connect() as conn:
            found = [conn.execute(q.limit(limit)).mappings().all() for q in queries]
        return [ledger_row(r) for r in itertools.islice(_merged(found), limit)]

    def count(self, flt: AuditFilter) -> int:
        """Number of rows matching ``flt``."""
        stmt = sa.select(sa.func.count()).select_from(_A).where(*conditions(flt))
        with self._engine.connect() as conn:
            return int(conn.execute(stmt).scalar_one())

    def stream(self, flt: AuditFilter, columns: Sequence[str]) -> Iterator[Mapping[Any, Any]]:
        """Matching rows (``columns``) in (decided_at, dispute_id, seq) order, streamed with a
        server-side cursor fetching ``batch`` rows at a time, in one snapshot."""
        queries = _branches(columns, flt.decision,
                            conditions(dataclasses.replace(flt, decision=None)))
        conn_ctx = self._engine.connect().execution_options(
            isolation_level="REPEATABLE READ", stream_results=True, yield_per=self._batch
        )
        with conn_ctx as conn, conn.begin():  # the branches' cursors share the snapshot
            # a download starts as soon as its first rows are read: plans that return rows
            # at once (ordered index scans merged), not a sort of every match first
            conn.execute(sa.text(
                "SELECT set_config('cursor_tuple_fraction', '0.01', true), "
                "set_config('jit', 'off', true)")).all()
            results = [conn.execute(q).mappings() for q in queries]
            try:
                extra = any(c.name not in columns for c in _ORDER)
                for row in _merged(results):
                    yield {c: row[c] for c in columns} if extra else row
            finally:
                for res in results:
                    res.close()


def _branches(columns: Sequence[str], decision: str | None,
              conds: Sequence[sa.ColumnElement[bool]]) -> list[sa.Select[Any]]:
    """One ordered query of ``columns`` (plus the order's keys) per
    :func:`decision_branches` branch of ``decision`` (one query without a decision filter),
    each in (decided_at, dispute_id, seq) order. Apart, each is an index range merged
    across partitions (PostgreSQL does not merge the branches of a ``UNION ALL`` over
    partitioned tables in order: it sorts every match, 2 s for 144,000 ``RESOLVED`` rows)."""
    wanted = [*columns, *[c.name for c in _ORDER if c.name not in columns]]
    picked = [_A.c[c] for c in wanted]
    branches = [None] if decision is None else decision_branches(decision)
    return [sa.select(*picked).where(*conds, *([] if b is None else [b])).order_by(*_ORDER)
            for b in branches]


def _merged(results: Sequence[Iterable[Mapping[Any, Any]]]) -> Iterator[Mapping[Any, Any]]:
    """The rows of ``results`` (each in (decided_at, dispute_id, seq) order, disjoint)
    merged in that order."""
    if len(results) == 1:
        return iter(results[0])
    return heapq.merge(*results, key=_order_key)


def _order_key(row: Mapping[Any, Any]) -> tuple[datetime, UUID, int]:
    """A row's (decided_at, dispute_id, seq)."""
    return row["decided_at"], row["dispute_id"], row["seq"]
