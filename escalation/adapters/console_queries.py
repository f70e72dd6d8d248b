"""Read-only PostgreSQL queries of the compliance console (implements
``service_layer.deadline_outcomes.ConsoleQueries``): disputes with regulatory deadlines and
their ledger events, and the pending escalations of the projection.

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

from escalation.adapters.audit_store import deadlines_from_json
from escalation.adapters.db import no_jit
from escalation.adapters.report_queries import clocks_sql
from escalation.ports import (
    ChainEvent,
    ClockFilter,
    ClockKey,
    DeadlineChain,
    DeadlineList,
    PendingEscalation,
    PendingFilter,
    TierCount,
)

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
_TIER_COUNTS = sa.text("""
    SELECT ladder, ladder_version, tier, count(*) AS pending,
           count(*) FILTER (WHERE due_at > CAST(:now AS timestamptz)
                              AND due_at <= CAST(:now AS timestamptz) + interval '1 hour')
               AS due_hour,
           count(*) FILTER (WHERE due_at > CAST(:now AS timestamptz)
                              AND due_at <= CAST(:now AS timestamptz) + interval '1 day')
               AS due_day,
           count(*) FILTER (WHERE due_at <= CAST(:now AS timestamptz)) AS overdue
      FROM escalation_state WHERE status = 'pending'
     GROUP BY ladder, ladder_version, tier
""")
"""The overview's load per tier: one pass over the pending rows (the partial index
``ix_escalation_state_due_at_pending`` finds them), never the other escalations."""
_PENDING_COLUMNS = ("dispute_id, external_id, ladder, ladder_version, tier, due_at, "
                    "entered_tier_at, status, remaining_ms")
_ELAPSED = ("date_part('epoch', CAST(:now AS timestamptz) - entered_tier_at)"
            " / GREATEST(date_part('epoch', due_at - entered_tier_at), 0.001)")
"""The share of a pending escalation's tier window elapsed at ``now`` (1.0 = due now), in
float8 throughout (``extract`` gives numeric: a third slower over 396,000 pending rows)."""
_PENDING = sa.text(
    "SELECT dispute_id, external_id, ladder, ladder_version, tier, due_at, entered_tier_at "
    "FROM escalation_state WHERE status = 'pending' ORDER BY due_at NULLS LAST, dispute_id"
)


_BY_IDS = sa.text(_HEAD + f" WHERE s.dispute_id = ANY(:ids) AND {_CLOCKS} IS NOT NULL")
_END_KEY = ("c.name = ANY(:after_end_names) AND "
            "(c.ladder || '@' || CAST(c.ladder_version AS text) || ':' || c.name) "
            "= ANY(:after_end)")
"""A clock of a deadline the resolution does not meet (``ladder@version:name``; the name
first, which ``ix_escalation_clock_after_end`` indexes on the ended disputes' clocks)."""
_OPENISH = f"((c.open AND NOT c.ended) OR (c.ended AND {_END_KEY}))"
_OPENISH_ENDED = f"c.ended AND {_END_KEY}"
"""A clock that may be open: binding on a dispute not ended, or on an ended dispute one the
resolution does not meet (every other clock of an ended dispute was met or missed by the
resolution or an action: decided)."""


def _clock_where(now: datetime, flt: ClockFilter) -> tuple[list[str], dict[str, Any]]:
    conds: list[str] = []
    params: dict[str, Any] = {
        "now": now, "after_end": list(flt.after_end), "risk": flt.at_risk_s,
        "after_end_names": sorted({k.rsplit(":", 1)[-1] for k in flt.after_end})}
    if flt.since is not None:
        conds.append("c.at >= :since")
        params["since"] = flt.since
    if flt.until is not None:
        conds.append("c.at < :until")
        params["until"] = flt.until
    if flt.ladder is not None:
        conds.append("c.ladder = :ladder")
        params["ladder"] = flt.ladder
    if flt.name is not None:
        conds.append("c.name = :name")
        params["name"] = flt.name
    if flt.ended is True:
        conds.append("c.ended")
    elif flt.ended is False and flt.state not in ("at_risk", "pending", "open_miss"):
        conds.append("NOT c.ended")
    soon = "CAST(:now AS timestamptz) + make_interval(secs => :risk)"
    # the same conditions spelled as the partial indexes' predicates when ``ended`` is
    # given (the planner matches them only so)
    openish = {None: _OPENISH, False: "c.open AND NOT c.ended",
               True: _OPENISH_ENDED}[flt.ended]
    settled = "NOT (c.open AND NOT c.ended)"
    state = {
        "at_risk": ["c.at > CAST(:now AS timestamptz)", f"c.at <= {soon}", openish],
        "pending": [f"c.at > {soon}", openish],
        "missed": ["c.at <= CAST(:now AS timestamptz)"],
        "open_miss": ["c.at <= CAST(:now AS timestamptz)", openish],
        "met": [settled],
        "undetermined": [settled],
    }.get(flt.state or "", [])
    return conds + state, params


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

    def tier_counts(self, now: datetime) -> list[TierCount]:
        """See ``ConsoleQueries.tier_counts``."""
        with self._engine.connect() as conn, conn.begin():
            no_jit(conn)
            return [TierCount(r["ladder"], int(r["ladder_version"]), r["tier"],
                              int(r["pending"]), int(r["due_hour"]), int(r["due_day"]),
                              int(r["overdue"]))
                    for r in conn.execute(_TIER_COUNTS, {"now": now}).mappings()]

    def pending_page(
        self, now: datetime, flt: PendingFilter, after: tuple[str, ...] | None, limit: int,
    ) -> list[tuple[PendingEscalation, tuple[str, ...]]]:
        """See ``ConsoleQueries.pending_page``. Two phases: the pending rows in the sort's
        order (keyset ``("0", key, dispute_id)``), then the paused ones by dispute id
        (``("1", dispute_id)``). Each page is one indexed range scan for ``due`` (``EXPLAIN``
        at 151k pending: Limit -> Incremental Sort -> Index Scan using
        ix_escalation_state_due_at_pending, 0.3 ms) and one pass over the pending rows with
        a top-N sort for ``elapsed`` (the share depends on ``now``: no index orders it)."""
        where, params = _pending_where(now, flt)
        out: list[tuple[PendingEscalation, tuple[str, ...]]] = []
        phase = "0" if after is None else after[0]
        with self._engine.connect() as conn:
            if phase == "0" and _wants_pending(flt):
                out += self._pending_phase(conn, flt, (where, params), after, limit)
            if len(out) < limit and _wants_paused(flt):
                keyset = after[1] if after is not None and after[0] == "1" else None
                sql = (f"SELECT {_PENDING_COLUMNS} FROM escalation_state "
                       f"WHERE status = 'paused' AND {where}"
                       + (" AND dispute_id > CAST(:k_id AS uuid)" if keyset else "")
                       + " ORDER BY dispute_id LIMIT :limit")
                rows = conn.execute(sa.text(sql), {**params, "k_id": keyset,
                                                   "limit": limit - len(out)}).mappings()
                out += [(_pending_row(r), ("1", str(r["dispute_id"]))) for r in rows]
        return out

    def _pending_phase(
        self, conn: sa.Connection, flt: PendingFilter, cond: tuple[str, dict[str, Any]],
        after: tuple[str, ...] | None, limit: int,
    ) -> list[tuple[PendingEscalation, tuple[str, ...]]]:
        """The pending rows of one page (``cond``: ``_pending_where``'s SQL and values)."""
        where, params = cond
        bound = {**params, "limit": limit}
        if flt.sort == "elapsed":
            # one pass over every pending row: no JIT compiling for it (~100 ms of ~450)
            conn.execute(sa.text("SET LOCAL jit = off"))
            keyset = ""
            if after is not None:
                keyset = (f" AND ({_ELAPSED}, dispute_id) < "
                          "(CAST(:k_key AS float8), CAST(:k_id AS uuid))")
                bound.update(k_key=float(after[1]), k_id=after[2])
            sql = (f"SELECT {_PENDING_COLUMNS}, {_ELAPSED} AS k FROM escalation_state "
                   f"WHERE status = 'pending' AND {where}{keyset} "
                   "ORDER BY k DESC, dispute_id DESC LIMIT :limit")
            rows = conn.execute(sa.text(sql), bound).mappings().all()
            return [(_pending_row(r), ("0", repr(float(r["k"])), str(r["dispute_id"])))
                    for r in rows]
        keyset = ""
        if after is not None:
            # the redundant due_at bound is the index condition; the row comparison the tie
            keyset = (" AND due_at >= CAST(:k_key AS timestamptz) AND (due_at, dispute_id) > "
                      "(CAST(:k_key AS timestamptz), CAST(:k_id AS uuid))")
            bound.update(k_key=datetime.fromisoformat(after[1]), k_id=after[2])
        sql = (f"SELECT {_PENDING_COLUMNS} FROM escalation_state "
               f"WHERE status = 'pending' AND {where}{keyset} "
               "ORDER BY due_at, dispute_id LIMIT :limit")
        rows = conn.execute(sa.text(sql), bound).mappings().all()
        return [(_pending_row(r), ("0", r["due_at"].isoformat(), str(r["dispute_id"])))
                for r in rows]

    def pending_total(self, now: datetime, flt: PendingFilter) -> int:
        """See ``ConsoleQueries.pending_total``."""
        where, params = _pending_where(now, flt)
        statuses = [s for s, wanted in (("pending", _wants_pending(flt)),
                                        ("paused", _wants_paused(flt))) if wanted]
        if not statuses:
            return 0
        sql = (f"SELECT count(*) FROM escalation_state WHERE status = ANY(:statuses) "
               f"AND {where}")
        with self._engine.connect() as conn:
            return int(conn.execute(sa.text(sql), {**params, "statuses": statuses})
                       .scalar_one())


    def clock_keys(
        self, now: datetime, flt: ClockFilter, after: ClockKey | None, limit: int,
        descending: bool = False,
    ) -> list[ClockKey]:
        """See ``ConsoleQueries.clock_keys``: one range scan of ``ix_escalation_clock_at``
        (EXPLAIN on 400,000 disputes: Limit -> Index Scan using ix_escalation_clock_at,
        the filters applied to the rows it reads)."""
        conds, params = _clock_where(now, flt)
        if after is not None:
            op = "<" if descending else ">"
            conds.append(f"(c.at, c.dispute_id, c.name) {op} "
                         "(CAST(:k_at AS timestamptz), CAST(:k_id AS uuid), :k_name)")
            params.update(k_at=after[0], k_id=str(after[1]), k_name=after[2])
        order = " DESC" if descending else ""
        sql = ("SELECT c.at, c.dispute_id, c.name FROM escalation_clock c"
               + (" WHERE " + " AND ".join(conds) if conds else "")
               + f" ORDER BY c.at{order}, c.dispute_id{order}, c.name{order} LIMIT :limit")
        with self._engine.connect() as conn:
            return [(r[0], r[1], r[2]) for r in
                    conn.execute(sa.text(sql), {**params, "limit": limit})]

    def clock_count(self, now: datetime, flt: ClockFilter, cap: int) -> int:
        """See ``ConsoleQueries.clock_count``."""
        conds, params = _clock_where(now, flt)
        sql = ("SELECT count(*) FROM (SELECT 1 FROM escalation_clock c"
               + (" WHERE " + " AND ".join(conds) if conds else "") + " LIMIT :cap) x")
        with self._engine.connect() as conn:
            return int(conn.execute(sa.text(sql), {**params, "cap": cap}).scalar_one())

    def chains_of(self, dispute_ids: Sequence[UUID]) -> list[DeadlineChain]:
        """See ``ConsoleQueries.chains_of``; one REPEATABLE READ snapshot."""
        if not dispute_ids:
            return []
        return self._chains(_BY_IDS, {"ids": list(dispute_ids)})


def _wants_pending(flt: PendingFilter) -> bool:
    return flt.stage != "paused"


def _wants_paused(flt: PendingFilter) -> bool:
    return flt.window is None and flt.stage in (None, "paused")


def _pending_where(now: datetime, flt: PendingFilter) -> tuple[str, dict[str, Any]]:
    """The filter as SQL (``due_at`` conditions hold for pending rows only: a paused row
    has none and is never asked for with them) and its parameters."""
    conds = ["TRUE"]
    params: dict[str, Any] = {"now": now}
    if flt.ladder is not None:
        conds.append("ladder = :ladder")
        params["ladder"] = flt.ladder
    if flt.tier is not None:
        conds.append("tier = :tier")
        params["tier"] = flt.tier
    if flt.window == "overdue" or flt.stage == "breached":
        conds.append("due_at <= CAST(:now AS timestamptz)")
    if flt.window in ("hour", "day") or flt.stage == "in_progress":
        conds.append("due_at > CAST(:now AS timestamptz)")
    if flt.window in ("hour", "day"):
        conds.append(f"due_at <= CAST(:now AS timestamptz) + interval '1 {flt.window}'")
    return " AND ".join(conds), params


def _pending_row(r: Any) -> PendingEscalation:
    return PendingEscalation(r["dispute_id"], r["external_id"], r["ladder"],
                             int(r["ladder_version"]), r["tier"], r["due_at"],
                             r["entered_tier_at"], r["status"],
                             None if r["remaining_ms"] is None else int(r["remaining_ms"]))



_ROLLED_KEYS = "r.at, r.dispute_id, r.name"
"""The deadline rows' keyset order (the indexes of migration 0019; ``name`` is in the "C"
collation: code point order, as Python compares names)."""
_LATE = ("COALESCE(CASE WHEN r.open_miss THEN "
         "floor(extract(epoch FROM (CAST(:now AS timestamptz) - r.at))) "
         "ELSE CAST(r.late_s AS numeric) END, -1)")
"""A deadline's lateness in whole seconds at ``now``: a miss still open is late up to
``now`` (stored without a lateness), else as stored; -1 when not known."""
_ROLLED_SORTS: dict[str, tuple[str, ...]] = {
    "late": (_LATE, "r.at"),
    "dispute": ('COALESCE(s.external_id, \'\') COLLATE "C"', "r.dispute_id"),
    "ladder": ('s.ladder COLLATE "C"', "s.ladder_version", "r.at"),
    "deadline": ("r.name", "r.at"),
    "tier": ('r.tier COLLATE "C"', "r.at"),
}
"""``deadline_outcomes.SORT_KEYS`` in SQL (then dispute id and name, as ``select`` breaks
ties; text in code point order, as Python compares it)."""


def _rolled_where(flt: ClockFilter) -> tuple[list[str], dict[str, Any]]:
    """The filter on the rollup's deadline rows (state as stored by the last refresh)."""
    conds = ["r.kind = 'deadline'"]
    params: dict[str, Any] = {}
    if flt.since is not None:
        conds.append("r.at >= :since")
        params["since"] = flt.since
    if flt.until is not None:
        conds.append("r.at < :until")
        params["until"] = flt.until
    if flt.ladder is not None:
        conds.append("s.ladder = :ladder")
        params["ladder"] = flt.ladder
    if flt.name is not None:
        conds.append("r.name = :name")
        params["name"] = flt.name
    if flt.state == "open_miss":
        conds.append("r.open_miss")  # the partial index's predicate, spelled as it is
    elif flt.state is not None:
        conds.append("r.state = :state")
        params["state"] = flt.state
    return conds, params


def _rolled_from(flt: ClockFilter, sort: str | None = None) -> str:
    """The rollup's rows, joined to the projection only when the filter or the sort reads
    its ladder or external id (the dispute as it stands, as the lists show it)."""
    joined = flt.ladder is not None or sort in ("dispute", "ladder")
    return ("sla_rollup r JOIN escalation_state s ON s.dispute_id = r.dispute_id"
            if joined else "sla_rollup r")


class PostgresRolledDeadlines:
    """``deadline_outcomes.RolledDeadlines`` over the SLA rollup's deadline rows of
    ``engine`` (migration 0019: indexes in the keyset order, by state, and on the open
    misses). Each list reads the keys of the rows it returns (an index range scan); the
    counts count index entries."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def keys(self, flt: ClockFilter, after: ClockKey | None, limit: int,
             descending: bool = False) -> list[ClockKey]:
        """See ``RolledDeadlines.keys``."""
        conds, params = _rolled_where(flt)
        if after is not None:
            op = "<" if descending else ">"
            conds.append(f"({_ROLLED_KEYS}) {op} (CAST(:k_at AS timestamptz), "
                         "CAST(:k_id AS uuid), CAST(:k_name AS text))")
            params.update(k_at=after[0], k_id=str(after[1]), k_name=after[2])
        order = " DESC" if descending else ""
        sql = (f"SELECT r.at, r.dispute_id, r.name FROM {_rolled_from(flt)} "
               f"WHERE {' AND '.join(conds)} ORDER BY r.at{order}, r.dispute_id{order}, "
               f"r.name{order} LIMIT :limit")
        with self._engine.connect() as conn:
            return [(r[0], r[1], r[2]) for r in
                    conn.execute(sa.text(sql), {**params, "limit": limit})]

    def count(self, flt: ClockFilter, cap: int | None = None) -> int:
        """See ``RolledDeadlines.count``."""
        conds, params = _rolled_where(flt)
        inner = f"SELECT 1 FROM {_rolled_from(flt)} WHERE {' AND '.join(conds)}"
        if cap is not None:
            inner += " LIMIT :cap"
            params["cap"] = cap
        with self._engine.connect() as conn:
            return int(conn.execute(sa.text(f"SELECT count(*) FROM ({inner}) x"),
                                    params).scalar_one())

    def counts(self, since: datetime | None, until: datetime | None,
               states: Sequence[str]) -> dict[str, int]:
        """See ``RolledDeadlines.counts``: one index-only range count per state
        (ix_sla_rollup_deadline_state; 15-55 ms for a 30-day period of 200,000 deadlines,
        125 ms as one pass grouping the period's rows)."""
        conds, params = _rolled_where(ClockFilter(since, until))
        sql = (f"SELECT s.state, (SELECT count(*) FROM sla_rollup r WHERE "
               f"{' AND '.join(conds)} AND r.state = s.state) "
               "FROM unnest(CAST(:states AS text[])) AS s(state)")
        with self._engine.connect() as conn:
            return {str(r[0]): int(r[1]) for r in conn.execute(
                sa.text(sql), {**params, "states": list(states)})}

    def sorted_keys(self, lst: DeadlineList, offset: int, limit: int) -> list[ClockKey]:
        """See ``RolledDeadlines.sorted_keys``."""
        flt, sort = lst.flt, lst.sort
        conds, params = _rolled_where(flt)
        order = " DESC" if lst.descending else ""
        terms = [*_ROLLED_SORTS[sort], "r.dispute_id", "r.name"]
        sql = (f"SELECT r.at, r.dispute_id, r.name FROM {_rolled_from(flt, sort)} "
               f"WHERE {' AND '.join(conds)} ORDER BY "
               + ", ".join(t + order for t in terms) + " OFFSET :offset LIMIT :limit")
        with self._engine.connect() as conn:
            return [(r[0], r[1], r[2]) for r in conn.execute(sa.text(sql), {
                **params, "now": lst.now, "offset": offset, "limit": limit})]
