"""The projection (``escalation_state``) against the ledger, streamed per dispute, and the
repair of a projection row from its ledger (``domain.projection`` holds the rules).

:func:`projection_differences` reads every projection row joined with its ledger rows in one
ordered query through a server-side cursor (``yield_per``: constant memory whatever the
ledger's size), folds each dispute's rows as they arrive and yields the disputes whose row
differs. Only the ``details`` keys the fold reads travel (``deadlines``, ``clocks``,
``binding``, ``member``), not whole row details, and JSON columns travel as text, decoded
once per dispute (the projection's) or only where present (the facts).

:class:`PostgresProjectionLedger` is the port ``reconcile.ProjectionLedger`` (built by
``bootstrap.projection_ledger_for``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from itertools import groupby
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from escalation.adapters.tables import escalation_state
from escalation.domain.audit_hash import verify_chain
from escalation.domain.errors import ConflictError
from escalation.domain.projection import (
    Clocks,
    ColumnDifference,
    LedgerStep,
    ProjectionColumn,
    ProjectionRow,
    compare_projection,
)

STREAM_ROWS = 2000
"""Rows fetched per round trip of the server-side cursor."""

_SCAN = sa.text(
    """
    SELECT s.dispute_id, s.status, s.tier, s.due_at, s.materiality, s.ladder,
           s.ladder_version, s.regulatory_deadline, s.trace_id, s.source_hash,
           s.external_id, s.source, CAST(s.deadlines AS text) AS deadlines,
           CAST(s.obligations AS text) AS obligations,
           a.seq AS a_seq, a.event AS a_event, a.to_tier AS a_to_tier,
           a.next_due_at AS a_next_due_at, a.regulatory_deadline AS a_regulatory_deadline,
           a.ladder AS a_ladder, a.ladder_version AS a_ladder_version,
           a.materiality AS a_materiality, a.trace_id AS a_trace_id,
           a.source_hash AS a_source_hash, a.external_id AS a_external_id,
           CASE WHEN a.event IN ('ENQUEUED', 'ACTION_RECORDED', 'RESOLVED', 'PURGED')
                THEN CAST(jsonb_strip_nulls(jsonb_build_object(
                       'deadlines', a.details -> 'deadlines', 'clocks', a.details -> 'clocks',
                       'binding', a.details -> 'binding', 'member', a.details -> 'member',
                       'source', a.details -> 'source'))
                     AS text)
           END AS a_facts
      FROM escalation_state AS s
      JOIN escalation_audit AS a
        ON a.dispute_id = s.dispute_id AND a.chain_created_at = s.created_at
     WHERE (CAST(:id AS uuid) IS NULL OR s.dispute_id = CAST(:id AS uuid))
     ORDER BY s.dispute_id, a.seq
    """
)


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def _clocks(value: Any) -> Clocks | None:
    """The JSONB ``[["name", "ISO UTC"], ...]`` of ``deadlines`` / ``obligations`` (decoded,
    or its text) as a map (None for NULL)."""
    if isinstance(value, str):
        value = json.loads(value)
    if value is None:  # SQL NULL, or a JSON null (how append_event stores "no clocks")
        return None
    return {str(n): datetime.fromisoformat(str(at)).astimezone(UTC) for n, at in value}


def projection_row(r: Mapping[Any, Any]) -> ProjectionRow:
    """The projection columns of a scan row (or an ``escalation_state`` row)."""
    return ProjectionRow(
        dispute_id=r["dispute_id"], status=r["status"], tier=r["tier"],
        due_at=_utc(r["due_at"]), materiality=Decimal(r["materiality"]), ladder=r["ladder"],
        ladder_version=int(r["ladder_version"]),
        regulatory_deadline=_utc(r["regulatory_deadline"]), trace_id=r["trace_id"],
        source_hash=r["source_hash"], external_id=r["external_id"],
        deadlines=_clocks(r["deadlines"]), obligations=_clocks(r["obligations"]),
        source=r.get("source"),
    )


def ledger_step(r: Mapping[Any, Any], prefix: str = "a_") -> LedgerStep:
    """The fold's view of a ledger row (scan columns carry ``prefix``)."""
    return LedgerStep(
        seq=int(r[prefix + "seq"]), event=r[prefix + "event"], to_tier=r[prefix + "to_tier"],
        next_due_at=_utc(r[prefix + "next_due_at"]),
        regulatory_deadline=_utc(r[prefix + "regulatory_deadline"]),
        ladder=r[prefix + "ladder"], ladder_version=int(r[prefix + "ladder_version"]),
        materiality=Decimal(r[prefix + "materiality"]), trace_id=r[prefix + "trace_id"],
        source_hash=r[prefix + "source_hash"], external_id=r[prefix + "external_id"],
        details=_decoded(r[prefix + "facts"]),
    )


def _decoded(value: Any) -> Mapping[str, Any]:
    """Ledger facts: JSON text (the scan sends text, decoded only where present) or a
    mapping."""
    if value is None:
        return {}
    facts: Mapping[str, Any] = json.loads(value) if isinstance(value, str) else value
    return facts


def scan_of(ids_sql: str) -> sa.TextClause:
    """:data:`_SCAN` over the disputes ``ids_sql`` names (a query of ``dispute_id``s,
    which may refer to parameters of its own), not every projection row."""
    text = str(_SCAN).replace(
        "FROM escalation_state AS s",
        f"FROM ({ids_sql}) AS ids JOIN escalation_state AS s ON s.dispute_id = ids.dispute_id")
    return sa.text(text)


def projection_differences(
    conn: sa.Connection, dispute_id: UUID | None = None,
    scan: sa.TextClause | None = None, params: dict[str, object] | None = None,
) -> Iterator[tuple[UUID, tuple[ColumnDifference, ...]]]:
    """``(dispute_id, differences)`` of every projection row (or only ``dispute_id``'s, or
    those of ``scan`` from :func:`scan_of` with its ``params``) that differs from its
    ledger, by dispute id; streamed on ``conn`` (inside the caller's transaction, so in its
    snapshot). A projection row without ledger rows (its chain removed by retention) is not
    compared."""
    rows = conn.execute((scan if scan is not None else _SCAN).execution_options(
        yield_per=STREAM_ROWS), {"id": dispute_id, **(params or {})}).mappings()
    try:
        for did, group in groupby(rows, key=lambda r: r["dispute_id"]):
            chain = list(group)
            found = compare_projection(projection_row(chain[0]),
                                       [ledger_step(r) for r in chain])
            if found:
                yield did, found
    finally:
        rows.close()  # the server-side cursor, also when the caller stops early


def render(differences: Sequence[ColumnDifference]) -> str:
    """``tier (projection 'compliance', ledger 'senior'), due_at (...)``."""
    return ", ".join(d.render() for d in differences)


_S = escalation_state


def _column_value(column: ProjectionColumn, value: object) -> object:
    """A determined value as the projection column stores it (clocks as JSON arrays)."""
    if column in (ProjectionColumn.DEADLINES, ProjectionColumn.OBLIGATIONS):
        if not isinstance(value, Mapping) or not value:
            return None
        return [[n, at.astimezone(UTC).isoformat()] for n, at in sorted(
            value.items(), key=lambda item: (item[1], item[0]))]
    return value


class PostgresProjectionLedger:
    """``reconcile.ProjectionLedger`` on PostgreSQL: the streamed comparison and the
    repair of one projection row from its ledger.

    Args:
        engine: a psycopg 3 engine on a database at the Alembic head.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def differences(self) -> Iterator[tuple[UUID, tuple[ColumnDifference, ...]]]:
        """:func:`projection_differences` of every dispute, in one REPEATABLE READ
        snapshot (read only)."""
        ctx = self._engine.connect().execution_options(isolation_level="REPEATABLE READ")
        with ctx as conn, conn.begin():
            yield from projection_differences(conn)

    def repair(self, dispute_id: UUID) -> tuple[ColumnDifference, ...]:
        """Set every column of ``dispute_id``'s projection that differs from its ledger to
        the ledger's value, in one transaction under the row's lock; returns what was
        changed (empty: nothing differed any more).

        Safe only when the ledger is: the chain must verify (every hash recomputed) and its
        last row must be the projection's head (``last_seq`` / ``last_hash``); a chain
        removed by retention is not repaired either. No ledger row is written (the
        projection is a cache of the ledger; the repair is logged by the caller).

        Raises:
            ConflictError: the chain does not verify, does not end at the projection's
                head, or is gone; nothing written.
        """
        with self._engine.begin() as conn:
            state = conn.execute(sa.select(_S).where(_S.c.dispute_id == dispute_id)
                                 .with_for_update()).mappings().first()
            if state is None:
                raise ConflictError(f"dispute {dispute_id}: no projection row")
            chain = [dict(r) for r in conn.execute(sa.text(
                "SELECT * FROM escalation_audit WHERE dispute_id = :d "
                "AND chain_created_at = :c ORDER BY seq"),
                {"d": dispute_id, "c": state["created_at"]}).mappings()]
            if not chain:
                raise ConflictError(f"dispute {dispute_id}: no ledger rows to repair from")
            bad = verify_chain(chain)
            head = chain[-1]
            if bad is not None or int(head["seq"]) != int(state["last_seq"]) or bytes(
                    head["row_hash"]) != bytes(state["last_hash"]):
                raise ConflictError(
                    f"dispute {dispute_id}: the ledger chain does not verify up to the "
                    "projection's head; the projection is not repaired from it (run "
                    "`escalation audit verify`)")
            steps = [ledger_step({**r, "facts": _facts(r)}, "") for r in chain]
            found = compare_projection(projection_row(state), steps)
            if found:
                values: dict[str, object] = {
                    d.column.value: _column_value(d.column, d.ledger) for d in found}
                values["updated_at"] = sa.func.clock_timestamp()
                conn.execute(sa.update(_S).where(_S.c.dispute_id == dispute_id).values(values))
        return found


def _facts(row: Mapping[str, Any]) -> dict[str, Any]:
    details = row.get("details") or {}
    return {k: details[k] for k in ("deadlines", "clocks", "binding", "member", "source")
            if details.get(k) is not None}
