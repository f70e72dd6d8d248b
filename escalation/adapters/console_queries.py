"""Read-only PostgreSQL queries of the compliance console (implements
``escalation.ports.ConsoleQueries``): disputes with regulatory deadlines and their ledger
events, and the pending escalations of the projection."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from uuid import UUID

import sqlalchemy as sa

from escalation.adapters.audit_rows import deadlines_from_json
from escalation.ports import ChainEvent, DeadlineChain, PendingEscalation

_CHAINS = sa.text(
    """
    SELECT s.dispute_id, s.external_id, s.ladder, s.ladder_version, s.deadlines,
           s.institution_tz, s.institution_calendar
      FROM escalation_state s
     WHERE s.deadlines IS NOT NULL
       AND (CAST(:did AS uuid) IS NULL OR s.dispute_id = CAST(:did AS uuid))
       AND EXISTS (SELECT 1 FROM jsonb_array_elements(s.deadlines) e
                    WHERE (CAST(:since AS timestamptz) IS NULL
                           OR CAST(e->>1 AS timestamptz) >= CAST(:since AS timestamptz))
                      AND (CAST(:until AS timestamptz) IS NULL
                           OR CAST(e->>1 AS timestamptz) < CAST(:until AS timestamptz)))
    """
)
_EVENTS = sa.text(
    "SELECT dispute_id, seq, event, decided_at, from_tier, to_tier FROM escalation_audit "
    "WHERE dispute_id = ANY(:ids) ORDER BY dispute_id, seq"
)
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
        ctx = self._engine.connect().execution_options(isolation_level="REPEATABLE READ")
        with ctx as conn, conn.begin():
            heads = conn.execute(_CHAINS, params).mappings().all()
            ids = [h["dispute_id"] for h in heads]
            events: dict[UUID, list[ChainEvent]] = defaultdict(list)
            if ids:
                for r in conn.execute(_EVENTS, {"ids": ids}).mappings():
                    events[r["dispute_id"]].append(ChainEvent(
                        int(r["seq"]), r["event"], r["decided_at"], r["from_tier"],
                        r["to_tier"]))
        return [
            DeadlineChain(h["dispute_id"], h["external_id"], h["ladder"],
                          int(h["ladder_version"]), deadlines_from_json(h["deadlines"]),
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
