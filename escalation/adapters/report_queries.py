"""Read-only reporting queries over the ledger and projection (demo summary, doctor, the
SLA report: ``PostgresReports`` implements ``escalation.ports.LedgerReports``).

Set-based queries over a list of disputes; the per-dispute reads live in audit_queries.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from escalation.adapters.tables import LADDER_CHAIN_EVENTS


def decision_counts(
    engine: sa.Engine, dispute_ids: Sequence[UUID], since: datetime | None = None
) -> dict[str, int]:
    """match_decision -> number of ledger rows over ``dispute_ids`` (decided at or after
    ``since`` when given)."""
    sql = sa.text(
        "SELECT match_decision, count(*) FROM escalation_audit "
        "WHERE dispute_id = ANY(:ids) AND (CAST(:since AS timestamptz) IS NULL "
        "OR decided_at >= :since) GROUP BY match_decision"
    )
    params = {"ids": list(dispute_ids), "since": since}
    with engine.connect() as conn:
        return {str(k): int(v) for k, v in conn.execute(sql, params)}


def undecided_due(engine: sa.Engine, dispute_ids: Sequence[UUID], at: datetime) -> int:
    """How many of ``dispute_ids`` are pending with a due time <= ``at`` (not fired yet)."""
    sql = sa.text(
        "SELECT count(*) FROM escalation_state WHERE dispute_id = ANY(:ids) "
        "AND status = 'pending' AND due_at <= :at"
    )
    with engine.connect() as conn:
        return int(conn.execute(sql, {"ids": list(dispute_ids), "at": at}).scalar_one())


def duplicate_decisions(engine: sa.Engine, dispute_ids: Sequence[UUID] | None = None) -> int:
    """DOUBLE_ESCALATION count: (dispute, from tier, ladder version) decided more than once.

    A decision is a PROMOTED or TERMINAL row; each (dispute, from_tier, ladder_version) may
    have at most one. Restricted to ``dispute_ids`` when given.
    """
    where = "event IN ('PROMOTED', 'TERMINAL')"
    params: dict[str, object] = {}
    if dispute_ids is not None:
        where += " AND dispute_id = ANY(:ids)"
        params["ids"] = list(dispute_ids)
    sql = sa.text(
        f"SELECT count(*) FROM (SELECT dispute_id, from_tier, ladder_version FROM "
        f"escalation_audit WHERE {where} GROUP BY 1, 2, 3 HAVING count(*) > 1) d"
    )
    with engine.connect() as conn:
        return int(conn.execute(sql, params).scalar_one())


def _array(column: str) -> str:
    return (f"(CASE WHEN jsonb_typeof({column}) = 'array' THEN {column} "
            f"WHEN jsonb_typeof({column}) = 'string' THEN CAST({column} #>> '{{}}' AS jsonb) END)")


def clocks_sql(alias: str) -> str:
    """Every clock of the projection row ``alias`` as a JSON array (``obligations`` after an
    action, else the binding ``deadlines``; a row holding the array's text as a JSON string,
    as ``append_event`` wrote before its fix, is read as the array), or NULL."""
    return f"COALESCE({_array(alias + '.obligations')}, {_array(alias + '.deadlines')})"


_LADDER_EVENTS = ", ".join(f"'{e}'" for e in LADDER_CHAIN_EVENTS)
_SLA_SELECT = """
    SELECT a.dispute_id, a.seq, a.event, a.from_tier, a.to_tier, a.ladder, a.due_at,
           a.decided_at, a.regulatory_deadline, a.ladder_version, a.external_id, a.actor,
           CASE WHEN a.event IN ('ENQUEUED', 'ACTION_RECORDED', 'RESOLVED', 'CANCELLED')
                THEN a.details END AS details,
           CASE WHEN a.seq = 1 THEN a.details END AS enq_details,
           CASE WHEN a.seq = 1 THEN a.details->>'entered_tier_at' END AS details_entered_at,
           CASE WHEN a.seq = 1 THEN s.entered_tier_at END AS state_entered_tier_at,
           CASE WHEN a.seq = 1 THEN """ + clocks_sql("s") + """ END AS state_clocks,
           CASE WHEN a.seq = 1 THEN s.ladder END AS state_ladder,
           CASE WHEN a.seq = 1 THEN s.ladder_version END AS state_ladder_version,
           CASE WHEN a.seq = 1 THEN s.institution_tz END AS state_institution_tz,
           CASE WHEN a.seq = 1 THEN s.institution_calendar END AS state_institution_calendar
      FROM escalation_audit a
      LEFT JOIN escalation_state s ON s.dispute_id = a.dispute_id
"""
SLA_SELECT = _SLA_SELECT
"""The report rows' columns (``SELECT ... FROM escalation_audit a LEFT JOIN escalation_state
s``), without a condition: :data:`SLA_ROWS` and the SLA rollup's per-dispute read add one."""
SLA_ROWS = sa.text(
    _SLA_SELECT
    + """
     WHERE a.event NOT IN (""" + _LADDER_EVENTS + """)  -- ladder version chains: no dispute
       AND a.dispute_id IN (
           SELECT dispute_id FROM escalation_audit
            WHERE (decided_at >= :since AND decided_at < :until)
               OR (regulatory_deadline >= :since AND regulatory_deadline < :until)
               OR (seq = 1 AND event = 'ENQUEUED' AND details ? 'deadlines'
                   AND EXISTS (SELECT 1 FROM jsonb_each_text(details->'deadlines') d
                                WHERE CAST(d.value AS timestamptz) >= :since
                                  AND CAST(d.value AS timestamptz) < :until))
            UNION
           SELECT s2.dispute_id FROM escalation_state s2
            WHERE EXISTS (SELECT 1 FROM jsonb_array_elements(""" + clocks_sql("s2")
    + """) e
                           WHERE CAST(e->>1 AS timestamptz) >= :since
                             AND CAST(e->>1 AS timestamptz) < :until))
     ORDER BY a.dispute_id, a.seq
    """
)
"""Every ledger row of the disputes with a decision or a regulatory deadline (any of the
ENQUEUED row's ``details["deadlines"]``, or any clock of the projection,
``COALESCE(obligations, deadlines)``) in ``[:since, :until)``, ordered by dispute then seq.
``details`` only for the rows the obligations rule reads (ENQUEUED, ACTION_RECORDED,
RESOLVED, CANCELLED); the first row carries the tier-entry instant, the ENQUEUED details and
the projection's clocks, pinned ladder version and institution
(``service_layer.sla_report``)."""

DISPUTE_ROWS = sa.text(_SLA_SELECT + " WHERE a.dispute_id = :did ORDER BY a.seq")
"""The same columns as :data:`SLA_ROWS` for one dispute's chain."""


class PostgresReports:
    """The ``LedgerReports`` port on PostgreSQL.

    Args:
        engine: a psycopg 3 engine on a database at the Alembic head.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def sla_rows(
        self, since: datetime, until: datetime
    ) -> tuple[datetime, list[dict[str, Any]]]:
        """(database clock now, :data:`SLA_ROWS` for the window) in one read transaction."""
        with self._engine.connect() as conn:
            now = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
            rows = conn.execute(SLA_ROWS, {"since": since, "until": until}).mappings()
            return now, [dict(r) for r in rows]

    def dispute_rows(self, dispute_id: UUID) -> tuple[datetime, list[dict[str, Any]]]:
        """(database clock now, :data:`DISPUTE_ROWS` of ``dispute_id``) in one read
        transaction."""
        with self._engine.connect() as conn:
            now = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
            rows = conn.execute(DISPUTE_ROWS, {"did": dispute_id}).mappings()
            return now, [dict(r) for r in rows]
