"""Read-only PostgreSQL queries of the compliance console (implements
``escalation.ports.ConsoleQueries``): disputes with regulatory deadlines and their ledger
events, and the pending escalations of the projection.

Candidates are selected by every clock's instant, ``COALESCE(obligations, deadlines)``: the
projection's ``deadlines`` holds only the clocks that still bind (migration 0010).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from escalation.adapters.audit_rows import deadlines_from_json
from escalation.adapters.report_queries import clocks_sql
from escalation.ports import ChainEvent, DeadlineChain, PendingEscalation

_CLOCKS = clocks_sql("s")
"""Every clock's instant: ``obligations`` after an action, else the binding ``deadlines``
(docs/adr/0010-obligations-and-resolution.md)."""
_HEAD = f"""
    SELECT s.dispute_id, s.external_id, s.ladder, s.ladder_version, {_CLOCKS} AS clocks,
           s.institution_tz, s.institution_calendar
      FROM escalation_state s
"""
_CHAINS = sa.text(
    _HEAD + f"""
     WHERE {_CLOCKS} IS NOT NULL
       AND (CAST(:did AS uuid) IS NULL OR s.dispute_id = CAST(:did AS uuid))
       AND EXISTS (SELECT 1 FROM jsonb_array_elements({_CLOCKS}) e
                    WHERE (CAST(:since AS timestamptz) IS NULL
                           OR CAST(e->>1 AS timestamptz) >= CAST(:since AS timestamptz))
                      AND (CAST(:until AS timestamptz) IS NULL
                           OR CAST(e->>1 AS timestamptz) < CAST(:until AS timestamptz)))
    """
)
_OPEN_MISS_CHAINS = sa.text(
    _HEAD + f"""
     WHERE {_CLOCKS} IS NOT NULL
       AND NOT (s.status IN ('resolved', 'cancelled')
                AND (s.ladder || '@' || s.ladder_version) = ANY(CAST(:closed AS text[])))
       AND EXISTS (SELECT 1 FROM jsonb_array_elements({_CLOCKS}) e
                    WHERE CAST(e->>1 AS timestamptz) <= CAST(:now AS timestamptz))
    """
)
_READ = ("ENQUEUED", "ACTION_RECORDED", "RESOLVED", "CANCELLED")
_EVENTS = sa.text(
    "SELECT dispute_id, seq, event, decided_at, from_tier, to_tier, actor, "
    "CASE WHEN event IN (" + ", ".join(f"'{e}'" for e in _READ) + ") THEN details END "
    "AS details FROM escalation_audit WHERE dispute_id = ANY(:ids) ORDER BY dispute_id, seq"
)
"""The ledger rows of the chains; ``details`` only for the events the obligations rule
reads (the others' details are not loaded)."""
_PENDING = sa.text(
    "SELECT dispute_id, external_id, ladder, ladder_version, tier, due_at, entered_tier_at "
    "FROM escalation_state WHERE status = 'pending' ORDER BY due_at NULLS LAST, dispute_id"
)


class PostgresConsoleQueries:
    """``ConsoleQueries`` over the ledger and projection tables of ``engine``."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def now(self) -> datetime:
        """The database clock (aware UTC)."""
        with self._engine.connect() as conn:
            now: datetime = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
        return now

    def deadline_chains(
        self, since: datetime | None = None, until: datetime | None = None,
        dispute_id: UUID | None = None,
    ) -> list[DeadlineChain]:
        """See ``ConsoleQueries.deadline_chains``; one REPEATABLE READ snapshot."""
        params = {"since": since, "until": until,
                  "did": None if dispute_id is None else str(dispute_id)}
        return self._chains(_CHAINS, params)

    def open_miss_chains(
        self, now: datetime, closed_by_resolution: Sequence[tuple[str, int]],
    ) -> list[DeadlineChain]:
        """See ``ConsoleQueries.open_miss_chains``; one REPEATABLE READ snapshot."""
        closed = [f"{name}@{version}" for name, version in closed_by_resolution]
        return self._chains(_OPEN_MISS_CHAINS, {"now": now, "closed": closed})

    def _chains(self, query: sa.TextClause, params: dict[str, Any]) -> list[DeadlineChain]:
        ctx = self._engine.connect().execution_options(isolation_level="REPEATABLE READ")
        with ctx as conn, conn.begin():
            heads = conn.execute(query, params).mappings().all()
            ids = [h["dispute_id"] for h in heads]
            events: dict[UUID, list[ChainEvent]] = defaultdict(list)
            if ids:
                for r in conn.execute(_EVENTS, {"ids": ids}).mappings():
                    events[r["dispute_id"]].append(ChainEvent(
                        int(r["seq"]), r["event"], r["decided_at"], r["from_tier"],
                        r["to_tier"], r["actor"] or "", r["details"]))
        return [
            DeadlineChain(h["dispute_id"], h["external_id"], h["ladder"],
                          int(h["ladder_version"]), deadlines_from_json(h["clocks"]),
                          tuple(events[h["dispute_id"]]), h["institution_tz"],
                          h["institution_calendar"])
            for h in heads
        ]

    def pending(self) -> list[PendingEscalation]:
        """See ``ConsoleQueries.pending``."""
        with self._engine.connect() as conn:
            return [
                PendingEscalation(r["dispute_id"], r["external_id"], r["ladder"],
                                  int(r["ladder_version"]), r["tier"], r["due_at"],
                                  r["entered_tier_at"])
                for r in conn.execute(_PENDING).mappings()
            ]
