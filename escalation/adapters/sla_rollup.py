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
from datetime import UTC, datetime, timedelta
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
HOUR_BUCKET_UPPERS_S: tuple[float, ...] = (3600, 4 * 3600, 86400, 2 * 86400, 5 * 86400,
                                          10 * 86400)
"""Stay-duration bucket uppers (s) counted in ``sla_rollup_hours`` (migration 0023): the
console's time-in-tier chart's; :meth:`PostgresSlaRollup.durations` over other uppers reads
the rows."""
_HOUR = timedelta(hours=1)
_KEY = ("ladder, tier, kind, COALESCE(state, ''), COALESCE(name, ''), "
        "COALESCE(width_bucket(duration_s, CAST(:uppers AS float8[])), -1)")
_ADD_HOURS = (
    "INSERT INTO sla_rollup_hours AS h (hour, ladder, tier, kind, state, name, bucket, n) "
    f"SELECT date_trunc('hour', at, 'UTC'), {_KEY}, {{sign}} count(*) FROM {{rows}} "
    "GROUP BY 1, 2, 3, 4, 5, 6, 7 "
    "ON CONFLICT (hour, ladder, tier, kind, state, name, bucket) "
    "DO UPDATE SET n = h.n + EXCLUDED.n")
_REMOVE = sa.text(
    "WITH gone AS (DELETE FROM sla_rollup WHERE dispute_id = ANY(:ids) "
    "RETURNING at, ladder, tier, kind, state, name, duration_s) "
    + _ADD_HOURS.format(sign="-", rows="gone"))
"""A dispute's rows removed and subtracted from the hour counts, in one statement."""
_ADD = sa.text(_ADD_HOURS.format(
    sign="", rows="(SELECT * FROM sla_rollup WHERE dispute_id = ANY(:ids)) AS r"))
"""The rows just written for ``ids`` added to the hour counts."""
_RECOUNT_HOURS = sa.text(_ADD_HOURS.format(sign="", rows="sla_rollup"))
"""Every rollup row counted into (an emptied) ``sla_rollup_hours``: the end of a backfill."""
_HOUR_COUNTS = sa.text(
    """
    SELECT width_bucket(hour, CAST(:bounds AS timestamptz[])) - 1 AS span, ladder, tier,
           kind, state, name, bucket, sum(n) AS n
      FROM sla_rollup_hours
     WHERE hour >= :lo AND hour < :hi AND hour <> ALL(CAST(:cut AS timestamptz[]))
     GROUP BY 1, 2, 3, 4, 5, 6, 7
    HAVING sum(n) <> 0
    """
)
"""The counts of the whole hours of a window that no span bound cuts."""
_ROW_COUNTS = sa.text(
    f"""
    SELECT width_bucket(at, CAST(:bounds AS timestamptz[])) - 1 AS span, {_KEY},
           count(*) AS n
      FROM sla_rollup
     WHERE at >= :since AND at < :until
     GROUP BY 1, 2, 3, 4, 5, 6, 7
    """
)
"""The same counts from the rows of ``[since, until)``: a window's edges, a cut hour."""
_ENDED = sa.text(
    """
    SELECT ladder, tier, count(*) AS ended,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_s) AS median_s,
           percentile_disc(0.95) WITHIN GROUP (ORDER BY duration_s) AS p95_s
      FROM sla_rollup
     WHERE at >= :since AND at < :until AND duration_s IS NOT NULL
     GROUP BY ladder, tier
    """
)
"""The exact median and p95 of the window's ended stays (``ix_sla_rollup_ended``)."""
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
_COUNTED = {"entered": ("kind", "entered"), "promoted_on_time": ("kind", "on_time"),
            "promoted_late": ("kind", "late"), "resolved": ("kind", "resolved"),
            "regulatory_met": ("state", "met"), "regulatory_missed": ("state", "missed"),
            "regulatory_at_risk": ("state", "at_risk"),
            "regulatory_pending": ("state", "pending"),
            "regulatory_undetermined": ("state", "undetermined")}
"""A figure of the report and the (column, value) of the rollup rows it counts."""


def _floor_hour(t: datetime) -> datetime:
    t = t.astimezone(UTC)
    return t.replace(minute=0, second=0, microsecond=0)


def _pieces(bounds: Sequence[datetime]) -> tuple[tuple[datetime, datetime] | None,
                                                 list[datetime],
                                                 list[tuple[datetime, datetime]]]:
    """How ``[bounds[0], bounds[-1])`` cut at ``bounds`` is counted: the whole hours
    ``[lo, hi)`` from ``sla_rollup_hours`` (None when the window holds no whole hour) but
    the hours a bound cuts, and the ranges read from the rows (the window's edges before
    ``lo`` and after ``hi``, each cut hour)."""
    since, until = bounds[0], bounds[-1]
    lo = _floor_hour(since)
    if lo < since:
        lo += _HOUR
    hi = _floor_hour(until)
    if lo >= hi:
        return None, [], [(since, until)]
    rows = [r for r in ((since, lo), (hi, until)) if r[0] < r[1]]
    cut = sorted({_floor_hour(b) for b in bounds[1:-1]
                  if _floor_hour(b) != b and lo <= _floor_hour(b) < hi})
    return (lo, hi), cut, rows + [(h, h + _HOUR) for h in cut]


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
            key = {"ids": list(ids), "uppers": list(HOUR_BUCKET_UPPERS_S)}
            if backfill_after is None:
                conn.execute(_REMOVE, key)
            else:  # a backfill's chunk: the hour counts are recounted when it finishes
                conn.execute(sa.text("DELETE FROM sla_rollup WHERE dispute_id = ANY(:ids)"),
                             key)
            if rows:
                _copy_rows(conn, rows)
                if backfill_after is None:
                    conn.execute(_ADD, key)
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
            conn.execute(sa.text("DELETE FROM sla_rollup_hours"))
            conn.execute(sa.text("DELETE FROM sla_rollup_state"))
            conn.execute(sa.text(
                "INSERT INTO sla_rollup_state (id, watermark, computed_at, grace_s, "
                "backfill_after) VALUES (1, :w, :c, :g, :a)"),
                {"w": watermark, "c": computed_at, "g": grace_s, "a": UUID(int=0)})

    def set_state(self, watermark: datetime, computed_at: datetime, grace_s: int,
                  recount_hours: bool = False) -> None:
        """Record a finished refresh (the watermark never moves back; no backfill is left
        unfinished); with ``recount_hours`` (after a backfill, whose chunks leave the hour
        counts alone), ``sla_rollup_hours`` is first recounted from the rows, in the same
        transaction: the hour counts are exact whenever no backfill is unfinished."""
        with self._engine.begin() as conn:
            if recount_hours:
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"),
                             {"k": ROLLUP_LOCK_KEY})
                conn.execute(sa.text("DELETE FROM sla_rollup_hours"))
                conn.execute(_RECOUNT_HOURS, {"uppers": list(HOUR_BUCKET_UPPERS_S)})
            conn.execute(sa.text(
                "INSERT INTO sla_rollup_state (id, watermark, computed_at, grace_s) "
                "VALUES (1, :w, :c, :g) ON CONFLICT (id) DO UPDATE SET "
                "watermark = GREATEST(sla_rollup_state.watermark, EXCLUDED.watermark), "
                "computed_at = EXCLUDED.computed_at, grace_s = EXCLUDED.grace_s, "
                "backfill_after = NULL"),
                {"w": watermark, "c": computed_at, "g": grace_s})

    def _counts(self, conn: sa.Connection,
                bounds: Sequence[datetime]) -> list[tuple[int, str, str, str, str, str, int, int]]:
        """(span, ladder, tier, kind, state, name, bucket, n) of ``[bounds[0], bounds[-1])``
        cut at ``bounds`` (span i: ``[bounds[i], bounds[i+1])``; state and name '' where
        none, bucket -1 without a duration; see :func:`_pieces`): the whole hours from
        ``sla_rollup_hours``, the rest from the rows. Keys may repeat: add them up."""
        whole, cut, ranges = _pieces(bounds)
        params: dict[str, Any] = {"bounds": list(bounds),
                                  "uppers": list(HOUR_BUCKET_UPPERS_S)}
        out: list[tuple[int, str, str, str, str, str, int, int]] = []
        if whole is not None:
            out += [(int(r[0]), r[1], r[2], r[3], r[4], r[5], int(r[6]), int(r[7]))
                    for r in conn.execute(_HOUR_COUNTS, {**params, "lo": whole[0],
                                                         "hi": whole[1], "cut": cut})]
        for since, until in ranges:
            out += [(int(r[0]), r[1], r[2], r[3], r[4], r[5], int(r[6]), int(r[7]))
                    for r in conn.execute(_ROW_COUNTS, {**params, "since": since,
                                                        "until": until})]
        return out

    def figures(self, since: datetime, until: datetime) -> list[dict[str, Any]]:
        """Per (ladder, tier) with a row in [since, until): the report's counts (summed from
        ``sla_rollup_hours`` and the rows of the hours the window cuts), the number of
        ended stays and their exact median and p95 durations (s; None without one: the
        ended stays' rows, ``ix_sla_rollup_ended``)."""
        found: dict[tuple[str, str], dict[str, Any]] = {}
        with self._engine.connect() as conn, conn.begin():
            no_jit(conn)
            for _span, ladder, tier, kind, state, _name, _b, n in self._counts(
                    conn, [since, until]):
                f = found.get((ladder, tier))
                if f is None:
                    f = found[(ladder, tier)] = {
                        "ladder": ladder, "tier": tier, **dict.fromkeys(_COUNTED, 0),
                        "ended": 0, "median_s": None, "p95_s": None}
                for figure, (column, value) in _COUNTED.items():
                    if (kind if column == "kind" else state) == value:
                        f[figure] += n
            for r in conn.execute(_ENDED, {"since": since, "until": until}).mappings():
                f = found.get((r["ladder"], r["tier"]))
                if f is not None:  # always: an ended stay is a counted row
                    f.update(ended=int(r["ended"]), median_s=r["median_s"], p95_s=r["p95_s"])
        return [found[k] for k in sorted(found)]

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
        """(ladder, tier, bucket, stays) of the stays ended in [since, until)
        (``width_bucket`` over ``uppers``, seconds, ascending: bucket 0 below the first, i in
        ``[uppers[i-1], uppers[i])``): summed from ``sla_rollup_hours`` when ``uppers`` are
        :data:`HOUR_BUCKET_UPPERS_S`, else counted from the rows."""
        with self._engine.connect() as conn, conn.begin():
            no_jit(conn)
            if tuple(uppers) != HOUR_BUCKET_UPPERS_S:
                return [(r[0], r[1], int(r[2]), int(r[3])) for r in conn.execute(
                    _DURATIONS, {"since": since, "until": until, "uppers": list(uppers)})]
            stays: dict[tuple[str, str, int], int] = {}
            for _span, ladder, tier, _k, _s, _n, bucket, n in self._counts(
                    conn, [since, until]):
                if bucket >= 0:
                    stays[(ladder, tier, bucket)] = stays.get((ladder, tier, bucket), 0) + n
        return [(*k, n) for k, n in sorted(stays.items()) if n]

    def outcomes(self, bounds: Sequence[datetime]) -> list[dict[str, Any]]:
        """Per span ``[bounds[i], bounds[i+1])`` (``span`` = i, ``bounds`` ascending) and
        (ladder, tier, name; name None for a stay): ``achieved`` (stays ended by a
        resolution in the tier: ``resolved`` rows with a duration), ``breached`` (ended by
        an escalation: ``on_time`` and ``late``), deadlines ``met`` and ``missed``; summed
        from ``sla_rollup_hours`` and the rows of the hours a bound cuts."""
        found: dict[tuple[int, str, str, str | None], dict[str, Any]] = {}
        with self._engine.connect() as conn, conn.begin():
            no_jit(conn)
            for span, ladder, tier, kind, state, name, bucket, n in self._counts(
                    conn, bounds):
                if kind == "entered":
                    continue
                key = (span, ladder, tier, name or None)
                o = found.get(key)
                if o is None:
                    o = found[key] = {"span": span, "ladder": ladder, "tier": tier,
                                      "name": name or None, "achieved": 0, "breached": 0,
                                      "met": 0, "missed": 0}
                if kind == "resolved" and bucket >= 0:
                    o["achieved"] += n
                elif kind in ("on_time", "late"):
                    o["breached"] += n
                if state in ("met", "missed"):
                    o[state] += n
        return list(found.values())
