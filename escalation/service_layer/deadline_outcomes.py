"""Per-deadline outcomes (met, missed, at risk, pending) and the console's overview figures,
computed from the ledger through the ``ConsoleQueries`` port.

Definitions (docs/console.md), the same as the SLA report's regulatory columns:

* a deadline is **met** when the dispute was resolved (a ``CANCELLED`` ledger row) at or
  before the deadline instant; ``resolved_at`` is that row's ``decided_at``;
* **missed** when the deadline instant is at or before *now* without that; lateness runs
  from the deadline to the resolution (resolved late) or to *now* (still open), in hours
  and in business days of the deadline's calendar (business days after the deadline's local
  date up to and including the end's local date);
* **at risk** when not met and the deadline falls in ``(now, now + at_risk]`` (48 h by
  default); **pending** otherwise;
* the tier **holding** a deadline is the tier the dispute was in at the deadline instant
  (its first tier when the deadline passed before it was enqueued).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from escalation.domain.business_calendar import INSTITUTION, BusinessCalendar, with_institution
from escalation.domain.calendars import CalendarRegistry
from escalation.domain.errors import EscalationError, InvalidInput, LadderError
from escalation.domain.ladder import Ladder
from escalation.ports import ConsoleQueries, DeadlineChain, PendingEscalation

AT_RISK = timedelta(hours=48)
STATUSES: tuple[str, ...] = ("met", "missed", "at_risk", "pending")
CSV_COLUMNS: tuple[str, ...] = (
    "dispute_id", "external_id", "ladder", "deadline", "citation", "deadline_at", "status",
    "met_or_missed_at", "late_hours", "late_business_days", "tier_at_deadline",
)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

LadderLookup = Callable[[str, int], Ladder]


@dataclass(frozen=True, slots=True)
class DeadlineOutcome:
    """One regulatory deadline of one dispute.

    Attributes:
        dispute_id, external_id: the dispute. ladder / ladder_version: its pinned version.
        name: the deadline's name in the ladder; citation: its legal source ("" if unknown).
        deadline: aware UTC instant. status: one of :data:`STATUSES`.
        resolved_at: the CANCELLED instant, or None while open.
        late_s: seconds late (0 unless missed; up to now while open).
        late_business_days: business days late on the deadline's calendar (0 unless missed).
        tier: the tier holding the dispute at the deadline.
    """

    dispute_id: UUID
    external_id: str | None
    ladder: str
    ladder_version: int
    name: str
    citation: str
    deadline: datetime
    status: str
    resolved_at: datetime | None
    late_s: float
    late_business_days: int
    tier: str

    @property
    def ladder_key(self) -> str:
        """``ladder@version``."""
        return f"{self.ladder}@{self.ladder_version}"

    @property
    def met_or_missed_at(self) -> datetime | None:
        """Met: the resolution instant. Missed: the deadline instant. Else None."""
        if self.status == "met":
            return self.resolved_at
        return self.deadline if self.status == "missed" else None


def _citation(ladder: Ladder | None, name: str) -> tuple[str, str | None]:
    """(citation, calendar id) of deadline ``name`` in ``ladder``."""
    if ladder is None:
        return "", None
    for d in ladder.deadlines:
        if d.name == name:
            return d.source, d.window.calendar
    return "", None


def _scoped(calendars: CalendarRegistry, chain: DeadlineChain) -> CalendarRegistry:
    """``calendars`` with ``institution`` = the dispute's own zone and base calendar (as its
    deadlines were counted at enqueue), when the chain names them and they are known."""
    if chain.institution_tz is None and chain.institution_calendar is None:
        return calendars
    base = calendars.get(INSTITUTION)
    tz = chain.institution_tz or str(getattr(base, "tz", "UTC"))
    cal = chain.institution_calendar or getattr(base, "base_id", None) or "us_federal_reserve"
    try:
        return with_institution(calendars, cal, tz)
    except InvalidInput:
        return calendars


def business_days_late(calendar: object, deadline: datetime, end: datetime) -> int:
    """Business days of ``calendar`` after ``deadline``'s local date, up to and including
    ``end``'s local date (0 when ``end`` is not after ``deadline``); whole 24 h days when
    the calendar has no business days (always open)."""
    if end <= deadline:
        return 0
    if not isinstance(calendar, BusinessCalendar):
        return (end - deadline).days
    day = (deadline - timedelta(microseconds=1)).astimezone(calendar.tz).date()
    last = end.astimezone(calendar.tz).date()
    count = 0
    while day < last:
        day += timedelta(days=1)
        if calendar.is_business_day(day):
            count += 1
    return count


def outcomes_of(
    chains: Iterable[DeadlineChain], now: datetime, ladders: LadderLookup,
    calendars: CalendarRegistry, at_risk: timedelta = AT_RISK,
) -> list[DeadlineOutcome]:
    """Every deadline of every chain with its outcome (pure; see the module docstring).

    Args:
        chains: from ``ConsoleQueries.deadline_chains``. now: aware UTC.
        ladders: ``(name, version) -> Ladder`` (LadderError = unknown: no citation, and
            lateness in whole days).
    """
    out: list[DeadlineOutcome] = []
    for chain in chains:
        try:
            ladder: Ladder | None = ladders(chain.ladder, chain.ladder_version)
        except LadderError:
            ladder = None
        cancelled = next((e.decided_at for e in chain.events if e.event == "CANCELLED"), None)
        scoped = _scoped(calendars, chain)
        for name, deadline in chain.deadlines:
            citation, cal_id = _citation(ladder, name)
            before = [e for e in chain.events if e.decided_at <= deadline]
            held = before[-1] if before else (chain.events[0] if chain.events else None)
            tier = "?" if held is None else (held.to_tier or held.from_tier or "?")
            if cancelled is not None and cancelled <= deadline:
                status = "met"
            elif deadline <= now:
                status = "missed"
            elif deadline <= now + at_risk:
                status = "at_risk"
            else:
                status = "pending"
            end = cancelled if cancelled is not None else now
            late_s = late_bd = 0
            if status == "missed":
                late_s = max(0, int((end - deadline).total_seconds()))
                late_bd = business_days_late(scoped.get(cal_id or ""), deadline, end)
            out.append(DeadlineOutcome(
                chain.dispute_id, chain.external_id, chain.ladder, chain.ladder_version, name,
                citation, deadline, status, cancelled, float(late_s), late_bd, tier))
    return out


def deadline_outcomes(
    queries: ConsoleQueries, ladders: LadderLookup, calendars: CalendarRegistry,
    since: datetime | None = None, until: datetime | None = None,
    dispute_id: UUID | None = None, now: datetime | None = None,
) -> list[DeadlineOutcome]:
    """Outcomes of the deadlines falling in ``[since, until)`` (aware UTC; None =
    unbounded), or of one dispute, at ``now`` (default: the database clock). Outcomes of
    a dispute's other deadlines outside the window are dropped.

    Raises:
        InvalidInput: naive or reversed bounds.
    """
    for label, t in (("from", since), ("to", until)):
        if t is not None and t.tzinfo is None:
            raise InvalidInput(f"{label} must carry a UTC offset")
    if since is not None and until is not None and since >= until:
        raise InvalidInput("from must be before to")
    now = queries.now() if now is None else now
    found = outcomes_of(queries.deadline_chains(since, until, dispute_id), now, ladders,
                        calendars)
    return [o for o in found
            if (since is None or o.deadline >= since) and (until is None or o.deadline < until)]


SORT_KEYS: dict[str, Callable[[DeadlineOutcome], Any]] = {
    "deadline_at": lambda o: o.deadline,
    "late": lambda o: (o.late_s, o.deadline),
    "dispute": lambda o: (o.external_id or "", str(o.dispute_id)),
    "ladder": lambda o: (o.ladder, o.ladder_version, o.deadline),
    "deadline": lambda o: (o.name, o.deadline),
    "tier": lambda o: (o.tier, o.deadline),
}


def select(
    outcomes: Sequence[DeadlineOutcome], *, status: str | None = None,
    ladder: str | None = None, deadline: str | None = None, sort: str = "deadline_at",
    descending: bool = False,
) -> list[DeadlineOutcome]:
    """Filter by status / ladder name / deadline name and sort (:data:`SORT_KEYS`).

    Raises:
        InvalidInput: unknown status or sort key.
    """
    if status is not None and status not in STATUSES:
        raise InvalidInput(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    if sort not in SORT_KEYS:
        raise InvalidInput(f"sort must be one of {', '.join(SORT_KEYS)}, got {sort!r}")
    rows = [o for o in outcomes
            if (status is None or o.status == status)
            and (ladder is None or o.ladder == ladder)
            and (deadline is None or o.name == deadline)]
    key = SORT_KEYS[sort]
    return sorted(rows, key=lambda o: (key(o), str(o.dispute_id), o.name), reverse=descending)


def safe_cell(value: object) -> object:
    """A CSV cell a spreadsheet will not evaluate: text starting with ``= + - @``, tab or
    carriage return gets a leading ``'`` (OWASP "CSV Injection"); other values unchanged."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def to_csv(outcomes: Iterable[DeadlineOutcome], zone: ZoneInfo) -> str:
    """CSV text (:data:`CSV_COLUMNS`): instants in ``zone`` with their offset, formula
    injection neutralised (:func:`safe_cell`)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for o in outcomes:
        at = o.met_or_missed_at
        w.writerow([safe_cell(v) for v in (
            str(o.dispute_id), o.external_id or "", o.ladder_key, o.name, o.citation,
            o.deadline.astimezone(zone).isoformat(), o.status,
            "" if at is None else at.astimezone(zone).isoformat(),
            f"{o.late_s / 3600:.2f}", o.late_business_days, o.tier)])
    return buf.getvalue()


@dataclass(frozen=True, slots=True)
class TierLoad:
    """Pending escalations of one (ladder, tier): counts at ``now``."""

    ladder: str
    tier: str
    rank: int
    pending: int
    due_hour: int
    due_day: int
    overdue: int


def tier_load(
    pending: Iterable[PendingEscalation], now: datetime, ladders: LadderLookup,
) -> list[TierLoad]:
    """Pending counts per (ladder, tier), tiers in ladder order (by rank in the pinned
    version; unknown tiers last). ``due_hour`` / ``due_day``: due in ``(now, now + 1 h]`` /
    ``(now, now + 24 h]``; ``overdue``: due at or before ``now``."""
    acc: dict[tuple[str, str], list[int]] = {}
    ranks: dict[tuple[str, str], int] = {}
    for p in pending:
        key = (p.ladder, p.tier)
        if key not in ranks:
            try:
                ranks[key] = ladders(p.ladder, p.ladder_version).tier(p.tier).rank
            except EscalationError:  # unknown ladder or tier: listed last
                ranks[key] = 1 << 30
        c = acc.setdefault(key, [0, 0, 0, 0])
        c[0] += 1
        if p.due_at is not None:
            if p.due_at <= now:
                c[3] += 1
            elif p.due_at <= now + timedelta(hours=1):
                c[1] += 1
                c[2] += 1
            elif p.due_at <= now + timedelta(days=1):
                c[2] += 1
    rows = [TierLoad(k[0], k[1], ranks[k], *v) for k, v in acc.items()]
    return sorted(rows, key=lambda t: (t.ladder, t.rank, t.tier))


def pending_window(p: PendingEscalation, now: datetime, window: str | None) -> bool:
    """True when ``p`` is in the overview's ``window``: ``hour``, ``day``, ``overdue`` or
    None (any). Raises InvalidInput for another value."""
    if window is None:
        return True
    if p.due_at is None:
        return False
    if window == "overdue":
        return p.due_at <= now
    if window in ("hour", "day"):
        span = timedelta(hours=1) if window == "hour" else timedelta(days=1)
        return now < p.due_at <= now + span
    raise InvalidInput(f"window must be hour, day or overdue, got {window!r}")


def utc(value: datetime) -> datetime:
    """``value`` in UTC (aware)."""
    return value.astimezone(UTC)
