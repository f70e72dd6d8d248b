"""Use case: the SLA report from its rollup (ADR 0033).

The rollup holds what each dispute contributes to the report in any window
(``sla_report.rollup_rows``: its tier-stay events at their instants, with durations, and its
regulatory deadlines with their state), so a report over a window aggregates the window's
rows instead of reading every chain active in it. :func:`refresh` brings it up to date
before each report:

1. the disputes with a ledger row recorded since the watermark (``recorded_at`` in
   ``[watermark - overlap, horizon)``; the horizon is the database clock or the start of the
   oldest open transaction, whichever is earlier, so no commit is skipped);
2. the disputes with a deadline whose state the clock alone moved since the last refresh:
   stored as pending and now within the at-risk span of ``now``, or stored as at risk and
   now passed (its state moves with the clock, not with the ledger);

each recomputed from its whole chain by the same pure functions the full recount uses, and
replaced as a whole. No watermark yet (the first refresh, or ``full``): every dispute, the
backfill, by dispute id in chunks, each chunk's transaction also recording the last id it
covered: an interrupted backfill keeps its chunks and the next refresh continues after
them (its watermark stays the backfill's start, so what changed meanwhile is read again).

The rollup is counted at :data:`~escalation.service_layer.sla_report.DEFAULT_GRACE_S`; a
report with another grace is a full recount (``sla_report.build``).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Protocol
from uuid import UUID
from zoneinfo import ZoneInfo

from escalation.domain.calendars import CalendarRegistry
from escalation.domain.errors import InvalidParameter, RollupNotBackfilled
from escalation.domain.timeutil import require_aware
from escalation.service_layer import deadline_outcomes as dl
from escalation.service_layer.deadline_outcomes import LadderLookup
from escalation.service_layer.sla_report import (
    DEFAULT_GRACE_S,
    DeadlineOutcome,
    SlaReport,
    TierFigures,
    check_window,
    deadline_items,
    stay_events,
)

OVERLAP = timedelta(seconds=5)
"""Recorded-at span below the watermark read again by each refresh (clock steps)."""
CHUNK = 500
"""Disputes recomputed and replaced per transaction."""

StoredRow = tuple[UUID, str, str, str, datetime, "float | None", "str | None", "str | None",
                  "float | None", "bool | None"]
"""One stored rollup row: (dispute id, kind, ladder, tier, instant it counts at, duration in
s, deadline state, deadline name, lateness in s, open miss): ``sla_report.rollup_rows``'s
row of the dispute and, on a deadline row, its lateness at the refresh (0 unless missed;
None when not known or while the miss is still open) and whether it is a miss still open
(missed, and no action ended it); both None on a stay row."""


def stored_rows(chain: Sequence[Any], now: datetime, calendars: CalendarRegistry | None,
                ladders: LadderLookup | None) -> list[StoredRow]:
    """What one dispute (its report rows by seq, at least one) contributes to the rollup as
    of ``now``: ``sla_report.rollup_rows`` (its stay events at the default grace and its
    deadlines with their state, from the same two functions the full recount counts with)
    with each deadline's lateness and open-miss flag (``deadline_outcomes.outcomes_of``,
    as the console's lists give them)."""
    did: UUID = chain[0]["dispute_id"]
    rows: list[StoredRow] = [(did, e.kind, e.ladder, e.tier, e.at, e.duration_s, None, None,
                              None, None) for e in stay_events(chain, DEFAULT_GRACE_S)]
    for item, ladder in deadline_items(chain, now, calendars, ladders):
        o = item.outcome
        assert o.deadline is not None  # noqa: S101 - deadline_items keeps known instants
        rows.append((did, "deadline", ladder, o.tier, o.deadline, None, o.status, o.name,
                     None if o.open_miss else o.late_s, o.open_miss))
    return rows


class RollupStore(Protocol):
    """The rollup's storage (adapter: ``adapters.sla_rollup.PostgresSlaRollup``)."""

    def state(self) -> tuple[datetime, datetime, int, UUID | None] | None:
        """(watermark, computed_at, grace_s, backfill_after) of the last refresh; None
        before the first; ``backfill_after`` is set while a backfill is unfinished."""
        ...

    def horizon(self) -> datetime:
        """No ledger row recorded before it can still commit."""
        ...

    def db_now(self) -> datetime:
        """The database clock."""
        ...

    def changed_since(self, since: datetime, upto: datetime,
                      chunk: int) -> Iterator[list[UUID]]:
        """Disputes with a ledger row recorded in [since, upto), in chunks."""
        ...

    def every_dispute(self, chunk: int,
                      after: UUID | None = None) -> Generator[list[UUID], None, None]:
        """Every dispute (above ``after`` when given), by id, in chunks."""
        ...

    def open_deadlines_before(self, until: datetime,
                              missed_at: datetime | None = None) -> list[UUID]:
        """Disputes with a deadline stored as at risk or pending at or before ``until``;
        with ``missed_at``, only those stored as pending or as at risk at or before
        ``missed_at`` (the ones the clock alone moved since)."""
        ...

    def chains(self, ids: Sequence[UUID]) -> list[dict[str, Any]]:
        """The report rows of ``ids``, by dispute then seq."""
        ...

    def replace(self, ids: Sequence[UUID], rows: Sequence[StoredRow],
                backfill_after: UUID | None = None) -> None:
        """Replace the rollup rows of ``ids`` (and record ``backfill_after`` as the
        backfill's resume point), in one transaction."""
        ...

    def begin_backfill(self, watermark: datetime, computed_at: datetime,
                       grace_s: int) -> None:
        """Remove every rollup row and record a backfill begun at ``watermark``."""
        ...

    def set_state(self, watermark: datetime, computed_at: datetime, grace_s: int,
                  recount_hours: bool = False) -> None:
        """Record a finished refresh; with ``recount_hours`` (a backfill ran), first bring
        any count the store keeps beside the rows up to date with them, in the same
        transaction."""
        ...

    def figures(self, since: datetime, until: datetime) -> list[dict[str, Any]]:
        """Aggregated figures per (ladder, tier) of the window."""
        ...

    def deadlines(self, since: datetime, until: datetime, state: str | None,
                  page: int) -> Iterator[list[tuple[UUID, str, datetime]]]:
        """The window's deadlines (dispute, name, instant), ordered, in pages."""
        ...

    def durations(self, since: datetime, until: datetime,
                  uppers: Sequence[float]) -> list[tuple[str, str, int, int]]:
        """(ladder, tier, bucket, stays) of the stays ended in the window, by duration:
        bucket i holds the durations in ``[uppers[i-1], uppers[i])`` seconds (0: below
        ``uppers[0]``, ``len(uppers)``: at or above the last)."""
        ...

    def outcomes(self, bounds: Sequence[datetime]) -> list[dict[str, Any]]:
        """Per span ``[bounds[i], bounds[i+1])`` (``span`` = i) and (ladder, tier, name):
        the stays ended by a resolution in the tier (``achieved``) or by an escalation
        (``breached``), and the deadlines ``met`` and ``missed``."""
        ...


@dataclass(frozen=True, slots=True)
class RefreshReport:
    """What a refresh did: ``full`` (every dispute), the disputes recomputed, the new
    watermark and the instant the deadline states were computed at."""

    full: bool
    disputes: int
    watermark: datetime
    now: datetime


@dataclass(frozen=True, slots=True)
class RollupPorts:
    """What the rollup's use cases read and write: the rollup's storage, and the calendars
    and ladders its deadline states are computed with (as for ``sla_report.compute``;
    None: the built-in calendars / an unknown ladder)."""

    store: RollupStore
    calendars: CalendarRegistry | None
    ladders: LadderLookup | None


@dataclass(frozen=True, slots=True)
class RefreshRollup:
    """A refresh of the rollup (:func:`refresh`).

    Attributes:
        now: the aware instant deadline states are computed at (None: the database clock;
            a naive one is refused, naming ``now``).
        full: recompute every dispute (after a ladder or calendars change that alters past
            outcomes).
        chunk: disputes per transaction.
    """

    now: datetime | None = None
    full: bool = False
    chunk: int = CHUNK


@dataclass(frozen=True, slots=True)
class RollupReport:
    """The report of the window ``[since, until)`` (aware) from the rollup, computed at
    ``now`` (None: the database clock), as :func:`report` and :func:`served_report` give
    it. A naive bound or ``since >= until`` is refused before anything is read."""

    since: datetime
    until: datetime
    now: datetime | None = None


@dataclass(frozen=True, slots=True)
class RollupDeadlines:
    """The deadlines of the window ``[since, until)`` (:func:`deadlines`): only the missed
    ones with ``missed_only``; ``now`` is the instant of the refresh that preceded (the
    rollup's states were computed at it); ``page``: rollup rows read at a time."""

    since: datetime
    until: datetime
    now: datetime
    missed_only: bool = False
    page: int = 1_000


def _recompute(ports: RollupPorts, ids: Sequence[UUID], now: datetime,
               backfill_after: UUID | None = None) -> None:
    rows = ports.store.chains(ids)
    out: list[StoredRow] = []
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i]["dispute_id"] != rows[start]["dispute_id"]:
            out += stored_rows(rows[start:i], now, ports.calendars, ports.ladders)
            start = i
    ports.store.replace(ids, out, backfill_after)


def refresh(cmd: RefreshRollup, ports: RollupPorts) -> RefreshReport:
    """Bring the rollup up to date with the ledger and the clock (module docstring), as
    ``cmd`` asks (:class:`RefreshRollup`).

    Raises:
        InvalidInput: a naive ``cmd.now`` (nothing written).
    """
    store, now, full, chunk = ports.store, cmd.now, cmd.full, cmd.chunk
    horizon = store.horizon()
    at = store.db_now() if now is None else require_aware(now, "now")
    state = store.state()
    count = 0
    after: UUID | None
    if full or state is None or state[2] != DEFAULT_GRACE_S:
        store.begin_backfill(horizon, at, DEFAULT_GRACE_S)
        full, since, after = True, horizon, UUID(int=0)
    else:
        since, after = state[0], state[3]
        full = after is not None  # an unfinished backfill: continued after its last chunk
    if after is not None:
        with closing(store.every_dispute(chunk, after)) as batches:
            for ids in batches:
                _recompute(ports, ids, at, backfill_after=ids[-1])
                count += len(ids)
    done: set[UUID] = set()
    for ids in store.changed_since(since - OVERLAP, horizon, chunk):
        _recompute(ports, ids, at)
        count += len(ids)
        done.update(ids)
    # the deadlines whose state the clock alone moved: pending ones now within the at-risk
    # span, at-risk ones now passed (domain.obligations.assess); when the clock went back
    # (an explicit earlier ``now``), every open one within the span, as computed then
    forward = state is not None and not full and at >= state[1]
    stale = [d for d in store.open_deadlines_before(at + dl.AT_RISK, at if forward else None)
             if d not in done]
    for i in range(0, len(stale), chunk):
        _recompute(ports, stale[i:i + chunk], at)
    count += len(stale)
    store.set_state(horizon, at, DEFAULT_GRACE_S, recount_hours=full)
    return RefreshReport(full, count, horizon, at)


class _Rolled(TierFigures):
    """Figures whose median and p95 were computed by the database (no duration list)."""

    __slots__ = ("_median", "_p95")

    def __init__(self, ladder: str, tier: str, median: float | None,
                 p95: float | None) -> None:
        super().__init__(ladder, tier)
        self._median = median
        self._p95 = p95

    @property
    def median_s(self) -> float | None:
        """Median time in tier (s) of the window, None without ended stays."""
        return self._median

    @property
    def p95_s(self) -> float | None:
        """95th percentile time in tier (s), nearest rank; None without ended stays."""
        return self._p95


def report(q: RollupReport, ports: RollupPorts) -> tuple[SlaReport, datetime]:
    """The report's figures per (ladder, tier) for ``[q.since, q.until)`` from the rollup, after
    a :func:`refresh`, and the instant the refresh computed the deadline states at (pass it
    to :func:`deadlines`, which streams the deadline list; the report's own is left empty).
    Lists the (ladder, tier) pairs with at least one figure in the window.

    Raises:
        InvalidInput: naive bounds, ``since >= until`` (before anything is read).
    """
    since, until = check_window(q.since, q.until, DEFAULT_GRACE_S)
    done = refresh(RefreshRollup(now=q.now), ports)
    tiers: list[TierFigures] = []
    for r in ports.store.figures(since, until):
        f = _Rolled(r["ladder"], r["tier"],
                    None if not r["ended"] else float(r["median_s"]),
                    None if not r["ended"] else float(r["p95_s"]))
        for name in ("entered", "promoted_on_time", "promoted_late", "resolved",
                     "regulatory_met", "regulatory_missed", "regulatory_at_risk",
                     "regulatory_pending", "regulatory_undetermined"):
            setattr(f, name, int(r[name]))
        tiers.append(f)
    tiers.sort(key=lambda f: (f.ladder, f.tier))  # code point order, as compute sorts
    return SlaReport(since, until, DEFAULT_GRACE_S, tiers), done.now


def deadlines(q: RollupDeadlines, ports: RollupPorts) -> Iterator[DeadlineOutcome]:
    """The window's deadlines (only the missed ones with ``q.missed_only``) with their full
    outcome (basis, action, lateness), in the full report's order (instant, dispute, name),
    a page of the rollup at a time: memory does not grow with the window. ``q.now``: the
    instant of the refresh that preceded (the rollup's states were computed at it)."""
    state = "missed" if q.missed_only else None
    for rows in ports.store.deadlines(q.since, q.until, state, q.page):
        ids = sorted({d for d, _, _ in rows})
        chains = ports.store.chains(ids)
        found: dict[tuple[UUID, str], DeadlineOutcome] = {}
        start = 0
        for i in range(1, len(chains) + 1):
            if i == len(chains) or chains[i]["dispute_id"] != chains[start]["dispute_id"]:
                chain = chains[start:i]
                for item, _ in deadline_items(chain, q.now, ports.calendars, ports.ladders):
                    found[(chain[0]["dispute_id"], item.name)] = item
                start = i
        for did, name, _ in rows:
            kept = found.get((did, name))
            if kept is not None:
                yield kept


NOT_BACKFILLED = ("the SLA rollup is not backfilled yet ({why}): its figures would be "
                  "partial. Run `escalation report sla-refresh` once (it folds the whole "
                  "ledger, resumes an interrupted backfill, and can run while this server "
                  "serves), then ask again")


def check_backfilled(store: RollupStore) -> None:
    """Refuse a report from a rollup not yet folded from the whole ledger.

    Raises:
        RollupNotBackfilled: no refresh ever ran, its backfill is unfinished (interrupted
            or running now), or it was folded at another grace. The message says what to
            run (``escalation report sla-refresh``).
    """
    state = store.state()
    if state is None:
        why = "no refresh has run on this database"
    elif state[3] is not None:
        why = "its backfill is unfinished: interrupted, or running now"
    elif state[2] != DEFAULT_GRACE_S:
        why = f"it was folded at a grace of {state[2]} s, not {DEFAULT_GRACE_S} s"
    else:
        return
    raise RollupNotBackfilled(NOT_BACKFILLED.format(why=why), why=why)


def served_report(q: RollupReport, ports: RollupPorts) -> tuple[SlaReport, datetime]:
    """:func:`report` for a reader that must not run the backfill itself (the console's SLA
    page, ``GET /v1/reports/sla``: a backfill takes minutes on a large ledger): the window
    is checked, then the rollup must be backfilled (:func:`check_backfilled`), then it is
    refreshed incrementally (what changed since the last refresh, as ``report sla`` does,
    so both give the same figures) and aggregated.

    Raises:
        InvalidInput: naive bounds, ``since >= until`` (nothing read).
        RollupNotBackfilled: see :func:`check_backfilled` (nothing written).
    """
    check_window(q.since, q.until, DEFAULT_GRACE_S)
    check_backfilled(ports.store)
    return report(q, ports)


def served_refresh(ports: RollupPorts) -> datetime:
    """Bring a backfilled rollup up to date for a reader that must not run the backfill
    (the console's deadline lists and overview, docs/adr/0037): :func:`check_backfilled`,
    then an incremental :func:`refresh` at the database clock. Returns the instant its
    deadline states were computed at: read the rollup's rows, and compute any outcome, at
    that instant.

    Raises:
        RollupNotBackfilled: see :func:`check_backfilled` (nothing written).
    """
    check_backfilled(ports.store)
    return refresh(RefreshRollup(), ports).now


PERIODS: tuple[str, ...] = ("week", "month")
"""The spans an achievement trend is counted in: a week from Monday 00:00, a month from
its first day 00:00, both in the zone the caller names."""
MAX_SPANS = 106
"""Most spans a trend shows (two years of weeks): a longer window asks for months."""


@dataclass(frozen=True, slots=True)
class Span:
    """One span of a trend: ``[start, end)`` (aware UTC) and its name (``2024-02`` for a
    month, the local date of its Monday for a week, ``2024-02-05``). The first and last
    spans are cut to the window, so they may be shorter than a week or a month."""

    start: datetime
    end: datetime
    label: str


def spans(since: datetime, until: datetime, period: str, zone: ZoneInfo) -> list[Span]:
    """The window ``[since, until)`` cut at each local week (Monday) or month start in
    ``zone`` (the caller names the zone: the console's institution zone).

    Raises:
        InvalidParameter: ``period`` not in :data:`PERIODS`, or the window spanning more
            than :data:`MAX_SPANS` of them (named ``period``).
    """
    if period not in PERIODS:
        raise InvalidParameter("{period} must be week or month, got {got!r}", "period",
                               got=period)
    since, until = check_window(since, until)
    local = since.astimezone(zone).date()
    first = local - timedelta(days=local.weekday()) if period == "week" else local.replace(day=1)

    def after(d: date) -> date:
        if period == "week":
            return d + timedelta(days=7)
        return (d.replace(day=1) + timedelta(days=32)).replace(day=1)

    def label(d: date) -> str:
        return d.isoformat() if period == "week" else f"{d:%Y-%m}"

    out: list[Span] = []
    start, d = since, first
    while start < until:
        nxt = after(d)
        end = min(until, datetime.combine(nxt, time(0), tzinfo=zone).astimezone(UTC))
        out.append(Span(start, end, label(d)))
        if len(out) > MAX_SPANS:
            raise InvalidParameter("{period} {got} cuts this from/to into more than "
                                   f"{MAX_SPANS} spans: choose month or a shorter window",
                                   "period", got=period)
        start, d = end, nxt
    return out


@dataclass(frozen=True, slots=True)
class Achievement:
    """One line of a trend: a (ladder, tier) or a (ladder, deadline name), and per span
    (the trend's :class:`Span` list, same order) the outcomes decided in it.

    Attributes:
        ladder, key: the ladder and the tier or deadline name.
        counts: per span, (achieved, not achieved): for a tier, the stays ended by a
            resolution in the tier and those ended by an escalation (the tier's SLA window
            elapsed: breached); for a deadline, met and missed. Open stays and deadlines
            (at risk, pending) and undetermined ones count in neither.
    """

    ladder: str
    key: str
    counts: tuple[tuple[int, int], ...]

    def rate(self, i: int) -> float | None:
        """Achievement rate of span ``i``: achieved / (achieved + not), 0-1; None when
        nothing was decided in it."""
        good, bad = self.counts[i]
        return good / (good + bad) if good + bad else None

    @property
    def total(self) -> tuple[int, int]:
        """(achieved, not achieved) over the whole window."""
        return (sum(c[0] for c in self.counts), sum(c[1] for c in self.counts))


@dataclass(frozen=True, slots=True)
class Trend:
    """The achievement trend of a window: its spans, one line per (ladder, tier) and one
    per (ladder, deadline name), each in code point order of its names."""

    spans: list[Span]
    tiers: list[Achievement]
    deadlines: list[Achievement]


def trend(store: RollupStore, cut: Sequence[Span]) -> Trend:
    """The achievement rate per span of ``cut`` (:func:`spans`) per (ladder, tier) and per
    (ladder, deadline) from the rollup as it stands (call after :func:`served_report`,
    which refreshed it): a stay counts in the span where it ended (the ``decided_at`` of
    the row that ended it), a deadline in the span of its instant, in the tier or under the
    name the report counts it in. Lines with nothing decided in the window are left out."""
    if not cut:
        return Trend([], [], [])
    bounds = [s.start for s in cut] + [cut[-1].end]
    n = len(cut)
    tiers: dict[tuple[str, str], list[list[int]]] = {}
    deadlines: dict[tuple[str, str], list[list[int]]] = {}
    for r in store.outcomes(bounds):
        i = int(r["span"])
        if not 0 <= i < n:  # pragma: no cover - the query selects inside the bounds
            continue
        if r["name"] is None:
            if r["achieved"] or r["breached"]:
                line = tiers.setdefault((r["ladder"], r["tier"]), [[0, 0] for _ in cut])
                line[i][0] += int(r["achieved"])
                line[i][1] += int(r["breached"])
        elif r["met"] or r["missed"]:
            line = deadlines.setdefault((r["ladder"], r["name"]), [[0, 0] for _ in cut])
            line[i][0] += int(r["met"])
            line[i][1] += int(r["missed"])

    def lines(found: dict[tuple[str, str], list[list[int]]]) -> list[Achievement]:
        return [Achievement(lad, key, tuple((a, b) for a, b in found[(lad, key)]))
                for lad, key in sorted(found)]

    return Trend(list(cut), lines(tiers), lines(deadlines))
