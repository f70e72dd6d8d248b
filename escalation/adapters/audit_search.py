"""Search and streaming reads of the ledger (implements ``escalation.ports.LedgerSearch``).

``stream`` uses a server-side cursor (``stream_results`` + ``yield_per``) in one
REPEATABLE READ snapshot, so an export's memory stays constant whatever the row count.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from escalation.adapters.audit_rows import ledger_row
from escalation.adapters.tables import LEDGER_EVENTS, escalation_audit
from escalation.domain.timeutil import require_aware
from escalation.ports import AuditFilter, LedgerRow

_A = escalation_audit
_ORDER = (_A.c.decided_at, _A.c.dispute_id, _A.c.seq)


def conditions(flt: AuditFilter) -> list[sa.ColumnElement[bool]]:
    """SQLAlchemy conditions for ``flt``. Raises InvalidInput for naive times."""
    conds: list[sa.ColumnElement[bool]] = []
    if flt.dispute_id is not None:
        conds.append(_A.c.dispute_id == flt.dispute_id)
    if flt.tier is not None:
        conds.append(sa.or_(_A.c.from_tier == flt.tier, _A.c.to_tier == flt.tier))
    if flt.decision is not None:
        conds.append(
            sa.or_(_A.c.match_decision == flt.decision, _A.c.event == flt.decision)
        )
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
        conds = conditions(flt)
        if after is not None:
            at, did, seq = after
            conds.append(sa.tuple_(*_ORDER)
                         > sa.tuple_(sa.literal(at), sa.literal(did), sa.literal(seq)))
        stmt = sa.select(_A).where(*conds).order_by(*_ORDER).limit(limit)
        with self._engine.connect() as conn:
            return [ledger_row(r) for r in conn.execute(stmt).mappings()]

    def count(self, flt: AuditFilter) -> int:
        """Number of rows matching ``flt``."""
        stmt = sa.select(sa.func.count()).select_from(_A).where(*conditions(flt))
        with self._engine.connect() as conn:
            return int(conn.execute(stmt).scalar_one())

    def stream(self, flt: AuditFilter, columns: Sequence[str]) -> Iterator[Mapping[Any, Any]]:
        """Matching rows (``columns``) in (decided_at, dispute_id, seq) order, streamed with a
        server-side cursor fetching ``batch`` rows at a time, in one snapshot."""
        stmt = sa.select(*[_A.c[c] for c in columns]).where(*conditions(flt)).order_by(*_ORDER)
        conn_ctx = self._engine.connect().execution_options(
            isolation_level="REPEATABLE READ", stream_results=True, yield_per=self._batch
        )
        with conn_ctx as conn, conn.begin():
            yield from conn.execute(stmt).mappings()
