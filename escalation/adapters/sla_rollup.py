"""The SLA report's rollup on PostgreSQL (``sla_rollup``, ``sla_rollup_state``: migration
0016, ADR 0033): the ``service_layer.sla_rollup.RollupStore`` port.

Each dispute's rows are replaced as a whole (DELETE + INSERT in one transaction), under a
transaction-level advisory lock so that two refreshes never interleave one dispute's rows.
Reports aggregate in the database: counts per (ladder, tier) and the exact median
(``percentile_cont(0.5)``: the mean of the two middle values, as ``statistics.median``) and
nearest-rank p95 (``percentile_disc(0.95)``: the ``ceil(0.95 n)``-th smallest) of the stay
durations of the window.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, cast
from uuid import UUID

import sqlalchemy as sa

from escalation.adapters.db import no_jit
from escalation.adapters.reconcile_state import PostgresLedgerChanges
from escalation.adapters.report_queries import SLA_SELECT
from escalation.adapters.tables import LADDER_CHAIN_EVENTS

StoredRow = tuple[UUID, str, str, str, datetime, float | None, str | None, str | None,
                  float | None, bool | None]
"""A rollup row as written (``service_layer.sla_rollup.StoredRow``)."""
ROLLUP_LOCK_KEY = 7_305_114_211_016
"""Advisory lock key of a refresh's write transactions (arbitrary: "SLA rollup")."""

_LADDER_EVENTS = ", ".join(f"'{e}'" for e in LADDER_CHAIN_EVENTS)
_CHAINS = sa.text(
    SLA_SELECT
    + f" WHERE a.event NOT IN ({_LADDER_EVENTS}) AND a.dispute_id = ANY(:ids)"
    # the ids' range, implied by the list: a backfill's chunk is a narrow range of ids, an
    # index range scan on each partition; without it the planner scanned every partition
    # whole for each chunk (0.4 s of 100,000 disputes' ledger per chunk, growing with it)
    " AND a.dispute_id BETWEEN :lo AND :hi"
    " ORDER BY a.dispute_id, a.seq")
_FIGURES = sa.text(
    """
    WITH counted AS (
        SELECT ladder, tier,
               count(*) FILTER (WHERE kind = 'entered') AS entered,
               count(*) FILTER (WHERE kind = 'on_time') AS promoted_on_time,
               count(*) FILTER (WHERE kind = 'late') AS promoted_late,
               count(*) FILTER (WHERE kind = 'resolved') AS resolved,
               count(*) FILTER (WHERE state = 'met') AS regulatory_met,
               count(*) FILTER (WHERE state = 'missed') AS regulatory_missed,
               count(*) FILTER (WHERE state = 'at_risk') AS regulatory_at_risk,
               count(*) FILTER (WHERE state = 'pending') AS regulatory_pending,
               count(*) FILTER (WHERE state = 'undetermined') AS regulatory_undetermined
          FROM sla_rollup
         WHERE at >= :since AND at < :until
         GROUP BY ladder, tier),
    ended AS (
        SELECT ladder, tier, count(*) AS ended,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_s) AS median_s,
               percentile_disc(0.95) WITHIN GROUP (ORDER BY duration_s) AS p95_s
          FROM sla_rollup
         WHERE at >= :since AND at < :until AND duration_s IS NOT NULL
         GROUP BY ladder, tier)
    SELECT c.*, COALESCE(e.ended, 0) AS ended, e.median_s, e.p95_s
      FROM counted c LEFT JOIN ended e USING (ladder, tier)
     ORDER BY c.ladder, c.tier
    """
)
"""The counts per (ladder, tier) by hashing every row of the window, the percentiles by
sorting only its ended stays (one sort of the whole window by (ladder, tier) took most of
the SLA page's time: 1.46 s of 800,000 rows, 0.9 s split)."""
_DEADLINES = sa.text(
    """
    SELECT dispute_id, name, at FROM sla_rollup
     WHERE kind = 'deadline' AND at >= :since AND at < :until
       AND (CAST(:state AS text) IS NULL OR state = :state)
       AND (at, dispute_id, name COLLATE "C") > (:at, CAST(:did AS uuid), :name COLLATE "C")
     ORDER BY at, dispute_id, name COLLATE "C"
     LIMIT :limit
    """
)
_DURATIONS = sa.text(
    """
    SELECT ladder, tier, width_bucket(duration_s, CAST(:uppers AS float8[])) AS bucket,
           count(*) AS stays
      FROM sla_rollup
     WHERE at >= :since AND at < :until AND duration_s IS NOT NULL
     GROUP BY ladder, tier, bucket
    """
)
_OUTCOMES = sa.text(
    """
    SELECT width_bucket(at, CAST(:bounds AS timestamptz[])) - 1 AS span, ladder, tier, name,
           count(*) FILTER (WHERE kind = 'resolved' AND duration_s IS NOT NULL) AS achieved,
           count(*) FILTER (WHERE kind IN ('on_time', 'late')) AS breached,
           count(*) FILTER (WHERE state = 'met') AS met,
           count(*) FILTER (WHERE state = 'missed') AS missed
      FROM sla_rollup
     WHERE at >= :since AND at < :until AND kind <> 'entered'
     GROUP BY span, ladder, tier, name
    """
)

_COPY = ("COPY sla_rollup (dispute_id, kind, ladder, tier, at, duration_s, state, name, "
         "late_s, open_miss) FROM STDIN")


def _copy_rows(conn: sa.Connection, rows: Sequence[StoredRow]) -> None:
    """Write ``rows`` with one COPY inside ``conn``'s transaction (a backfill chunk's
    thousands of rows: an INSERT per row cost more than computing them)."""
    driver = conn.connection.driver_connection  # the psycopg 3 Connection
    if driver is None:  # pragma: no cover - only after the connection was invalidated
        raise sa.exc.InvalidRequestError("connection has no live driver connection")
    with driver.cursor() as cur, cur.copy(_COPY) as copy:
        for row in rows:
            copy.write_row(row)


class PostgresSlaRollup:
    """The SLA rollup on PostgreSQL.

    Args:
        engine: a psycopg 3 engine on a database at the Alembic head.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._changes = PostgresLedgerChanges(engine)

    def state(self) -> tuple[datetime, datetime, int, UUID | None] | None:
        """(watermark, computed_at, grace_s, backfill_after) of the last refresh; None
        before the first. ``backfill_after``: the last dispute id an unfinished backfill
        committed, None once it finished."""
        with self._engine.connect() as conn:
            row = conn.execute(sa.text(
                "SELECT watermark, computed_at, grace_s, backfill_after "
                "FROM sla_rollup_state WHERE id = 1")).first()
        if row is None:
            return None
        return row[0].astimezone(UTC), row[1].astimezone(UTC), int(row[2]), row[3]

    def horizon(self) -> datetime:
        """min(database clock, start of the oldest open transaction): no ledger row with an
        earlier ``recorded_at`` can still commit (``PostgresLedgerChanges.horizon``)."""
        return self._changes.horizon()

    def db_now(self) -> datetime:
        """The database clock (aware UTC)."""
        with self._engine.connect() as conn:
            value = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
        return cast(datetime, value).astimezone(UTC)

    def changed_since(self, since: datetime, upto: datetime,
                      chunk: int) -> Iterator[list[UUID]]:
        """Disputes with a ledger row recorded in [since, upto), in chunks."""
        return self._changes.changed_since(since, upto, chunk)

    def every_dispute(self, chunk: int,
                      after: UUID | None = None) -> Generator[list[UUID], None, None]:
        """Every dispute of the projection (with an id above ``after`` when given), by id,
        in chunks (a full refresh), streamed by a server-side cursor."""
        with self._engine.connect() as conn:
            result = conn.execution_options(yield_per=max(chunk, 100)).execute(sa.text(
                "SELECT dispute_id FROM escalation_state WHERE dispute_id > :after "
                "ORDER BY dispute_id"), {"after": after or UUID(int=0)})
            try:
                for part in result.partitions(chunk):
                    yield [r[0] for r in part]
            finally:
                result.close()  # the server-side cursor, also when the caller stops early

    def open_deadlines_before(self, until: datetime,
                              missed_at: datetime | None = None) -> list[UUID]:
        """Disputes with a deadline stored as at risk or pending whose instant is at or
        before ``until`` (its state may have moved on since it was computed); with
        ``missed_at``, only the pending ones and the at-risk ones at or before
        ``missed_at`` (an at-risk deadline still ahead stays at risk)."""
        with self._engine.connect() as conn:
            return [r[0] for r in conn.execute(sa.text(
                "SELECT DISTINCT dispute_id FROM sla_rollup WHERE kind = 'deadline' "
                "AND state IN ('at_risk', 'pending') AND at <= :until "
                "AND (CAST(:missed_at AS timestamptz) IS NULL OR state = 'pending' "
                "OR at <= :missed_at)"), {"until": until, "missed_at": missed_at})]

    def chains(self, ids: Sequence[UUID]) -> list[dict[str, Any]]:
        """The report rows (``report_queries.SLA_SELECT`` columns) of ``ids``, by dispute
        then seq."""
        with self._engine.connect() as conn:
            if not ids:
                return []
            return [dict(r) for r in conn.execute(_CHAINS, {
                "ids": list(ids), "lo": min(ids), "hi": max(ids)}).mappings()]

    def replace(self, ids: Sequence[UUID], rows: Sequence[StoredRow],
                backfill_after: UUID | None = None) -> None:
        """Replace the rollup rows of ``ids`` by ``rows`` (``sla_rollup.StoredRow``: dispute
        id, kind, ladder, tier, at, duration_s, state, name, late_s, open_miss) in one
        transaction; with ``backfill_after``, the same
        transaction records it as the backfill's resume point."""
        with self._engine.begin() as conn:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": ROLLUP_LOCK_KEY})
            conn.execute(sa.text("DELETE FROM sla_rollup WHERE dispute_id = ANY(:ids)"),
                         {"ids": list(ids)})
            if rows:
                _copy_rows(conn, rows)
            if backfill_after is not None:
                conn.execute(sa.text(
                    "UPDATE sla_rollup_state SET backfill_after = :a WHERE id = 1"),
                    {"a": backfill_after})

    def begin_backfill(self, watermark: datetime, computed_at: datetime,
                       grace_s: int) -> None:
        """Remove every rollup row and record an unfinished backfill from the start
        (``backfill_after`` = the nil UUID, below every dispute id), in one transaction."""
        with self._engine.begin() as conn:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": ROLLUP_LOCK_KEY})
            conn.execute(sa.text("DELETE FROM sla_rollup"))
            conn.execute(sa.text("DELETE FROM sla_rollup_state"))
            conn.execute(sa.text(
                "INSERT INTO sla_rollup_state (id, watermark, computed_at, grace_s, "
                "backfill_after) VALUES (1, :w, :c, :g, :a)"),
                {"w": watermark, "c": computed_at, "g": grace_s, "a": UUID(int=0)})

    def set_state(self, watermark: datetime, computed_at: datetime, grace_s: int) -> None:
        """Record a finished refresh (the watermark never moves back; no backfill is left
        unfinished)."""
        with self._engine.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO sla_rollup_state (id, watermark, computed_at, grace_s) "
                "VALUES (1, :w, :c, :g) ON CONFLICT (id) DO UPDATE SET "
                "watermark = GREATEST(sla_rollup_state.watermark, EXCLUDED.watermark), "
                "computed_at = EXCLUDED.computed_at, grace_s = EXCLUDED.grace_s, "
                "backfill_after = NULL"),
                {"w": watermark, "c": computed_at, "g": grace_s})

    def figures(self, since: datetime, until: datetime) -> list[dict[str, Any]]:
        """Per (ladder, tier) with a row in [since, until): the report's counts, the number
        of ended stays and their median and p95 durations (s; None without one)."""
        with self._engine.connect() as conn, conn.begin():
            no_jit(conn)
            return [dict(r) for r in conn.execute(
                _FIGURES, {"since": since, "until": until}).mappings()]

    def deadlines(self, since: datetime, until: datetime, state: str | None,
                  page: int) -> Iterator[list[tuple[UUID, str, datetime]]]:
        """The deadlines in [since, until) (only those in ``state`` when given) as
        (dispute id, name, instant), by instant, dispute and name (code point order, as
        ``sla_report.compute`` sorts), in keyset pages of
        ``page`` rows: one page in memory at a time."""
        at, did, name = datetime(1, 1, 1, tzinfo=UTC), UUID(int=0), ""
        while True:
            with self._engine.connect() as conn:
                rows = [(r[0], r[1], r[2]) for r in conn.execute(_DEADLINES, {
                    "since": since, "until": until, "state": state, "at": at,
                    "did": did, "name": name, "limit": page})]
            if not rows:
                return
            yield rows
            if len(rows) < page:
                return
            did, name, at = rows[-1]

    def durations(self, since: datetime, until: datetime,
                  uppers: Sequence[float]) -> list[tuple[str, str, int, int]]:
        """(ladder, tier, bucket, stays) of the stays ended in [since, until), counted by
        the database (``width_bucket`` over ``uppers``, seconds, ascending: bucket 0 below
        the first, i in ``[uppers[i-1], uppers[i])``)."""
        with self._engine.connect() as conn, conn.begin():
            no_jit(conn)
            return [(r[0], r[1], int(r[2]), int(r[3])) for r in conn.execute(
                _DURATIONS, {"since": since, "until": until, "uppers": list(uppers)})]

    def outcomes(self, bounds: Sequence[datetime]) -> list[dict[str, Any]]:
        """Per span ``[bounds[i], bounds[i+1])`` (``span`` = i, ``bounds`` ascending) and
        (ladder, tier, name; name None for a stay): ``achieved`` (stays ended by a
        resolution in the tier: ``resolved`` rows with a duration), ``breached`` (ended by
        an escalation: ``on_time`` and ``late``), deadlines ``met`` and ``missed``; one
        index range scan of the window."""
        with self._engine.connect() as conn, conn.begin():
            no_jit(conn)
            return [dict(r) for r in conn.execute(_OUTCOMES, {
                "bounds": list(bounds), "since": bounds[0], "until": bounds[-1]}).mappings()]
