"""Per-deadline outcomes (met, missed, at risk, pending, undetermined) and the console's
overview figures, computed from the ledger through the ``ConsoleQueries`` port.

The rule is ``domain.obligations`` (docs/adr/0010-obligations-and-resolution.md): for each
dispute the clocks are rebuilt from its ENQUEUED row and its recorded actions
(``service_layer.obligations.recorded_actions`` / ``dispute_clocks``), then ``assess``-ed.
The console, ``report sla`` and ``audit search --deadlines`` all call :func:`outcomes_of`,
so they give the same state for the same dispute. Definitions (docs/console.md):

* **met**: an action the deadline's ``met_by`` names (the resolution, ``resolve`` or
  ``cancel``, by default) happened strictly before the deadline instant (basis ``record``:
  the action, its instant and its actor are shown), or an import asserts it timely without
  an instant (basis ``source``);
* **missed**: the instant passed without that. Lateness runs from the deadline to the late
  action (missed on record) or to *now* (still open), in hours and in business days of the
  deadline's calendar (business days after the deadline's local date up to and including the
  end's local date). Missed per the source: the lateness is unknown (None), never 0;
* **at risk**: open and due within ``at_risk`` (48 h by default); **pending**: open, later;
* **undetermined**: closed per the source, which gives neither an instant nor timeliness for
  this deadline, or a clock whose start has no known instant;
* the tier **holding** a deadline is the tier the dispute was in at the deadline instant
  (its first tier when the deadline passed before it was enqueued, or has no instant).

A dispute pinned to a ladder version this deployment does not know keeps the default
``met_by`` (the resolution) for each of its recorded deadlines.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, cast
from uuid import UUID
from zoneinfo import ZoneInfo

from escalation.domain.calendars import (
    INSTITUTION,
    BusinessCalendar,
    CalendarRegistry,
    SlaWindow,
    WindowUnit,
    with_institution,
)
from escalation.domain.csv_cells import CsvWriter, csv_text
from escalation.domain.errors import EscalationError, InvalidInput, LadderError
from escalation.domain.ladder import RESOLUTION, ActionDef, Ladder, RegulatoryDeadline
from escalation.domain.obligations import AT_RISK as _AT_RISK
from escalation.domain.obligations import STATES as _STATES
from escalation.domain.obligations import Assessment, Basis, DeadlineState, assess
from escalation.ports import (
    ClockFilter,
    ClockKey,
    DeadlineChain,
    DeadlineList,
    PendingEscalation,
    PendingFilter,
    TierCount,
)
from escalation.service_layer.obligations import (
    base_clocks,
    dispute_clocks,
    recorded_actions,
)


class ConsoleQueries(Protocol):
    """Read-only queries of the compliance console (adapter:
    ``adapters.console_queries.PostgresConsoleQueries``)."""

    def now(self) -> datetime:
        """The database clock (aware UTC)."""
        ...

    def deadline_chains(
        self, since: datetime | None = None, until: datetime | None = None,
        dispute_id: UUID | None = None,
    ) -> list[DeadlineChain]:
        """Disputes having a clock (``COALESCE(obligations, deadlines)``) in ``[since,
        until)`` (None = unbounded), or the one ``dispute_id``, with their ledger events."""
        ...

    def open_miss_chains(
        self, now: datetime, closed_by_resolution: Sequence[tuple[str, int]],
    ) -> list[DeadlineChain]:
        """The candidates for a deadline missed and still open at ``now``: disputes with a
        clock at or before ``now``, except ended (resolved / cancelled) disputes pinned to a
        ``(ladder, version)`` of ``closed_by_resolution`` (every deadline there is met by the
        resolution, so an ended dispute has no open miss). A superset: the rule decides."""
        ...

    def pending(self) -> list[PendingEscalation]:
        """Every pending escalation (status ``pending``), by due time."""
        ...

    def clock_keys(
        self, now: datetime, flt: ClockFilter, after: ClockKey | None, limit: int,
        descending: bool = False,
    ) -> list[ClockKey]:
        """At most ``limit`` clocks matching ``flt`` at ``now`` in (instant, dispute id,
        name) order (or the reverse), after the keyset ``after``."""
        ...

    def clock_count(self, now: datetime, flt: ClockFilter, cap: int) -> int:
        """How many clocks match ``flt`` at ``now``, counting no further than ``cap``."""
        ...

    def chains_of(self, dispute_ids: Sequence[UUID]) -> list[DeadlineChain]:
        """The named disputes with their clocks and ledger events (a bounded list)."""
        ...

    def tier_counts(self, now: datetime) -> list[TierCount]:
        """Pending counts per (ladder, version, tier) at ``now``, counted by the database."""
        ...

    def pending_page(
        self, now: datetime, flt: PendingFilter, after: tuple[str, ...] | None, limit: int,
    ) -> list[tuple[PendingEscalation, tuple[str, ...]]]:
        """At most ``limit`` escalations matching ``flt`` in its sort order, after the
        keyset ``after`` (None: from the first), each with its own keyset (opaque strings,
        ``after`` of the next page). ``now`` must be the same on every page of one walk."""
        ...

    def pending_total(self, now: datetime, flt: PendingFilter) -> int:
        """How many escalations match ``flt`` at ``now``."""
        ...


class RolledDeadlines(Protocol):
    """The deadline rows of the SLA rollup, as the console's lists and overview read them
    (adapter: ``adapters.console_queries.PostgresRolledDeadlines``; docs/adr/0037). Each
    row is one deadline with a known instant and its state as of the rollup's last refresh
    (``sla_rollup.refresh``): read them right after a refresh, at its instant. A
    ``ClockFilter``'s ``state`` is the stored state (``open_miss``: missed, and no action
    ended it); ``ladder`` is the dispute's ladder as it stands; ``at_risk_s``,
    ``after_end`` and ``ended`` are not read (the rule decided when the row was stored)."""

    def keys(self, flt: ClockFilter, after: ClockKey | None, limit: int,
             descending: bool = False) -> list[ClockKey]:
        """At most ``limit`` deadlines matching ``flt`` in (instant, dispute id, name)
        order (names in code point order; or the reverse), after the keyset ``after``."""
        ...

    def count(self, flt: ClockFilter, cap: int | None = None) -> int:
        """How many deadlines match ``flt`` (counting no further than ``cap`` when given)."""
        ...

    def counts(self, since: datetime | None, until: datetime | None,
               states: Sequence[str]) -> dict[str, int]:
        """How many deadlines of each of ``states`` (stored state) have their instant in
        ``[since, until)`` (None = unbounded)."""
        ...

    def sorted_keys(self, lst: DeadlineList, offset: int, limit: int) -> list[ClockKey]:
        """The keys of the deadlines matching ``lst.flt`` ordered by ``lst.sort`` (a key of
        :data:`SORT_KEYS` other than ``deadline_at``, as :func:`select` orders; a miss
        still open late up to ``lst.now``; ``lst.descending``: the reverse), ``limit`` of
        them after the first ``offset``."""
        ...


AT_RISK = _AT_RISK
"""An open deadline within this span of *now* is at risk (``domain.obligations.AT_RISK``)."""
STATUSES: tuple[str, ...] = _STATES
"""``met``, ``missed``, ``at_risk``, ``pending``, ``undetermined``: the same words in the
console, its CSV, ``report sla`` and ``audit search --deadlines``."""
CSV_COLUMNS: tuple[str, ...] = (
    "dispute_id", "external_id", "ladder", "deadline", "citation", "deadline_at", "status",
    "basis", "met_or_missed_at", "action", "action_at", "actor", "action_recorded_at",
    "late_hours",
    "late_business_days", "tier_at_deadline",
)
UNKNOWN = "unknown"
"""What a lateness that the source does not give reads as (never 0)."""

LadderLookup = Callable[[str, int], Ladder]


@dataclass(frozen=True, slots=True)
class DeadlineSources:
    """What the console's deadline functions read: the ledger's clocks and chains
    (``queries``), the ladder versions (``ladders``: ``(name, version) -> Ladder``,
    LadderError = unknown, as :func:`outcomes_of` reads it) and the deployment's
    calendars."""

    queries: ConsoleQueries
    ladders: LadderLookup
    calendars: CalendarRegistry


@dataclass(frozen=True, slots=True)
class DeadlineOutcome:
    """One regulatory deadline of one dispute.

    Attributes:
        dispute_id, external_id: the dispute. ladder / ladder_version: its pinned version.
        name: the deadline's name in the ladder; citation: its legal source ("" if unknown).
        deadline: aware UTC instant; None when the action starting the clock has no known
            instant. status: one of :data:`STATUSES`.
        resolved_at: the dispute's resolution instant (RESOLVED or CANCELLED row), or None.
        late_s: seconds late (0 unless missed; up to now while open); None = unknown
            (missed per the source, or undetermined).
        late_business_days: business days late on the deadline's calendar (0 unless
            missed); None = unknown.
        tier: the tier holding the dispute at the deadline.
        basis: ``record`` or ``source`` for a met / missed state an action decided; None
            while open or when nothing was recorded (missed and still open).
        action: the action that met it, or the late action that ended a miss (None: open).
        action_at: that action's aware UTC instant (None: per the source, or open).
        actor: who recorded that action (None: open).
        rule: why the clock falls where it does ("" = the ladder's own rule).
        action_recorded_at: when the ledger recorded that action (Redis TIME): an action
            entered long after it happened says so (None: open).
        amount_unchecked: that action needs the full disputed amount, and the dispute has
            none on record (materiality 0.00): its amount was not checked.
    """

    dispute_id: UUID
    external_id: str | None
    ladder: str
    ladder_version: int
    name: str
    citation: str
    deadline: datetime | None
    status: str
    resolved_at: datetime | None
    late_s: float | None
    late_business_days: int | None
    tier: str
    basis: str | None = None
    action: str | None = None
    action_at: datetime | None = None
    actor: str | None = None
    rule: str = ""
    action_recorded_at: datetime | None = None
    amount_unchecked: bool = False

    @property
    def ladder_key(self) -> str:
        """``ladder@version``."""
        return f"{self.ladder}@{self.ladder_version}"

    @property
    def met_or_missed_at(self) -> datetime | None:
        """Met: the instant of the action that met it (None per the source). Missed: the
        deadline instant. Else None."""
        if self.status == DeadlineState.MET:
            return self.action_at
        return self.deadline if self.status == DeadlineState.MISSED else None

    @property
    def open_miss(self) -> bool:
        """Missed and still open: no action, on time or late, has ended it."""
        return self.status == DeadlineState.MISSED and self.action is None

    @property
    def action_label(self) -> str:
        """The action in words (``provisional credit``); "" when none."""
        return "" if self.action is None else self.action.replace("_", " ")

    def explain(self, at: Callable[[datetime], str]) -> str:
        """What the state rests on, in one phrase (``at`` formats an instant): ``met by
        provisional credit on <instant> by <actor>``, ``met per source (instant not
        given)``, ``missed per source``, ``missed: resolution late on <instant> by
        <actor>``, ``missed, still open``; "" for at risk and pending."""
        if self.status == DeadlineState.MET:
            return self._met(at)
        if self.status == DeadlineState.MISSED:
            return self._missed(at)
        if self.status == DeadlineState.UNDETERMINED:
            if self.action is not None:
                return (f"undetermined: {self.action_label} per source, which gives no "
                        "instant and no timeliness for this deadline")
            return f"undetermined: {self.rule or 'the instant is not known'}"
        return ""

    def _met(self, at: Callable[[datetime], str]) -> str:
        if self.basis == Basis.SOURCE:
            return f"met per source (instant not given): {self.action_label}"
        if self.action_at is None:
            recorded = "" if self.action_recorded_at is None else at(self.action_recorded_at)
            return (f"met: {self.action_label} recorded on {recorded}, before the deadline "
                    "(instant not given)")
        return (f"met by {self.action_label} on {at(self.action_at)} by {self.actor}"
                + self._entered_later(at)
                + (" (no disputed amount on record: the amount was not checked)"
                   if self.amount_unchecked else ""))

    def _entered_later(self, at: Callable[[datetime], str]) -> str:
        """``, recorded <instant>`` when the action was entered a day or more after it
        happened (an examiner tells a record made at the time from one made after)."""
        if self.action_at is None or self.action_recorded_at is None:
            return ""
        if self.action_recorded_at - self.action_at < timedelta(days=1):
            return ""
        return f", recorded {at(self.action_recorded_at)}"

    def _missed(self, at: Callable[[datetime], str]) -> str:
        if self.basis == Basis.SOURCE:
            return f"missed per source: {self.action_label} late, lateness unknown"
        if self.action is not None and self.action_at is not None:
            return f"missed: {self.action_label} late on {at(self.action_at)} by {self.actor}"
        return "missed, still open"


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


@dataclass(frozen=True, slots=True)
class _UnknownLadder:
    """A ladder version this deployment does not know, as the rule reads it: each recorded
    deadline is met by the resolution only (the default ``met_by``, ADR 0010)."""

    deadlines: tuple[RegulatoryDeadline, ...]
    actions: tuple[ActionDef, ...] = ()  # none declared: a cancel still counts as resolution


def _recorded_citations(chain: DeadlineChain) -> dict[str, str]:
    """Citations the ENQUEUED row recorded (``details.deadline_rules``), by deadline."""
    for e in chain.events:
        if e.event == "ENQUEUED":
            rules = (e.details or {}).get("deadline_rules")
            if isinstance(rules, dict):
                return {str(n): str((v or {}).get("citation", "")) for n, v in rules.items()
                        if isinstance(v, dict)}
            break
    return {}


def _stand_in(chain: DeadlineChain, names: Iterable[str]) -> Ladder:
    cites = _recorded_citations(chain)
    window = SlaWindow(1, WindowUnit.CALENDAR_DAYS)
    return cast(Ladder, _UnknownLadder(tuple(
        RegulatoryDeadline(n, "unknown", window, source=cites.get(n, "")) for n in names)))


def _tier_at(chain: DeadlineChain, deadline: datetime | None) -> str:
    before = [] if deadline is None else [e for e in chain.events if e.decided_at <= deadline]
    held = before[-1] if before else (chain.events[0] if chain.events else None)
    return "?" if held is None else (held.to_tier or held.from_tier or "?")


def _assessments(
    chain: DeadlineChain, now: datetime, ladders: LadderLookup, calendars: CalendarRegistry,
    at_risk: timedelta,
) -> tuple[Ladder | None, list[Assessment]]:
    """The pinned ladder (None: unknown) and ``domain.obligations.assess`` of one chain."""
    try:
        ladder: Ladder | None = ladders(chain.ladder, chain.ladder_version)
    except LadderError:
        ladder = None
    actions = recorded_actions(chain.events)
    scoped = _scoped(calendars, chain)
    if ladder is None:
        names = list(base_clocks(chain.events, chain.deadlines))
        rule = _stand_in(chain, names)
    else:
        rule = ladder
    try:
        placed = dispute_clocks(rule, chain.events, actions, scoped, chain.deadlines)
    except EscalationError:  # an unknown calendar or attribute of an action clock
        rule = _stand_in(chain, list(base_clocks(chain.events, chain.deadlines)))
        ladder = None
        placed = dispute_clocks(rule, chain.events, actions, scoped, chain.deadlines)
    return ladder, assess(rule, placed, actions, now, at_risk)


def outcomes_of(
    chains: Iterable[DeadlineChain], now: datetime, ladders: LadderLookup,
    calendars: CalendarRegistry, at_risk: timedelta = AT_RISK,
) -> list[DeadlineOutcome]:
    """Every deadline of every chain with its outcome (pure; see the module docstring).

    Args:
        chains: from ``ConsoleQueries.deadline_chains`` (events with ``actor`` and, for
            ENQUEUED / ACTION_RECORDED / RESOLVED / CANCELLED, ``details``). now: aware UTC.
        ladders: ``(name, version) -> Ladder`` (LadderError = unknown: each recorded
            deadline is met by the resolution only; citation as recorded at enqueue;
            lateness in business days of the dispute's institution calendar).
        calendars: the deployment's registry (scoped to each dispute's institution here).
        at_risk: an open deadline due within this span of ``now`` is at risk.
    """
    out: list[DeadlineOutcome] = []
    for chain in chains:
        ladder, states = _assessments(chain, now, ladders, calendars, at_risk)
        actions = recorded_actions(chain.events)
        resolved = next((a.occurred_at for a in actions if a.action == RESOLUTION), None)
        scoped = _scoped(calendars, chain)
        cites = _recorded_citations(chain) if ladder is None else {}
        for a in states:
            citation, cal_id = _citation(ladder, a.name)
            cal_id = INSTITUTION if ladder is None else cal_id
            citation = citation or a.citation or cites.get(a.name, "")
            late_s: float | None = a.late_s
            late_bd: int | None = 0
            if a.state is DeadlineState.MISSED and a.at is not None and a.late_s is not None:
                end = (a.by.occurred_at if a.by is not None and a.by.occurred_at is not None
                       else now)
                late_s = float(max(0, int((end - a.at).total_seconds())))
                late_bd = business_days_late(scoped.get(cal_id or ""), a.at, end)
            elif a.state is DeadlineState.MISSED or a.state is DeadlineState.UNDETERMINED:
                late_s, late_bd = None, None
            else:
                late_s = 0.0
            by = a.by
            out.append(DeadlineOutcome(
                chain.dispute_id, chain.external_id, chain.ladder, chain.ladder_version,
                a.name, citation, a.at, a.state.value, resolved, late_s, late_bd,
                _tier_at(chain, a.at), None if a.basis is None else a.basis.value,
                None if by is None else by.action, None if by is None else by.occurred_at,
                None if by is None else by.actor, a.rule,
                None if by is None else by.recorded_at,
                by is not None and by.unchecked))
    return out


def closed_by_resolution(ladders: Iterable[Ladder]) -> list[tuple[str, int]]:
    """``(name, version)`` of the ladders whose every deadline the resolution meets: an
    ended dispute on them has no open miss (``ConsoleQueries.open_miss_chains``)."""
    # a version that declares actions is left out: a cancel there records no finding, so a
    # cancelled dispute may still hold an open miss
    return [(lad.name, lad.version) for lad in ladders if not lad.actions
            and all(RESOLUTION in d.met_by and not d.started_by for d in lad.deadlines)]


def open_misses(
    src: DeadlineSources, known: Iterable[Ladder], now: datetime | None = None,
) -> list[DeadlineOutcome]:
    """Every deadline missed and still open at ``now`` (default: the database clock),
    whatever its instant: the overview's count that no period hides. ``known``: the
    deployment's ladder versions (to skip ended disputes that cannot have one)."""
    now = src.queries.now() if now is None else now
    chains = src.queries.open_miss_chains(now, closed_by_resolution(known))
    return [o for o in outcomes_of(chains, now, src.ladders, src.calendars) if o.open_miss]


def deadline_outcomes(
    src: DeadlineSources, since: datetime | None = None, until: datetime | None = None,
    dispute_id: UUID | None = None, now: datetime | None = None,
) -> list[DeadlineOutcome]:
    """Outcomes of the deadlines falling in ``[since, until)`` (aware UTC; None =
    unbounded), or of one dispute, at ``now`` (default: the database clock). Outcomes of
    a dispute's other deadlines outside the window are dropped, and so are clocks without
    a known instant when a bound is given (the dispute's own page lists them).

    Raises:
        InvalidInput: naive or reversed bounds.
    """
    for label, t in (("from", since), ("to", until)):
        if t is not None and t.tzinfo is None:
            raise InvalidInput(f"{label} must carry a UTC offset")
    if since is not None and until is not None and since >= until:
        raise InvalidInput("from must be before to")
    now = src.queries.now() if now is None else now
    found = outcomes_of(src.queries.deadline_chains(since, until, dispute_id), now,
                        src.ladders, src.calendars)
    if since is None and until is None:
        return found
    return [o for o in found if o.deadline is not None
            and (since is None or o.deadline >= since) and (until is None or o.deadline < until)]


SCAN_BATCH = 200
"""Clocks read per query while a deadline list fills a page."""
SCAN_CAP = 4000
"""At most this many clocks are read for one page: a page of a rare state in a long list
stops there, with a cursor to go on from (bounded time per request)."""
COUNT_CAP = 20_000
"""Lists sorted other than by instant, and the overview's period figures, are computed
whole only up to this many clocks (else the page says so: narrow the period or ladder)."""


def after_end(known: Iterable[Ladder]) -> tuple[str, ...]:
    """``ladder@version:name`` of every deadline the resolution does not meet (a notice
    owed after it): on an ended dispute only these can still be open."""
    return tuple(f"{lad.name}@{lad.version}:{d.name}" for lad in known
                 for d in lad.deadlines if RESOLUTION not in d.met_by)


def _keep(o: DeadlineOutcome, state: str | None) -> bool:
    if state is None:
        return True
    if state == "open_miss":
        return o.open_miss
    return o.status == state


def walk(
    src: DeadlineSources, lst: DeadlineList, after: ClockKey | None = None,
    batch: int = SCAN_BATCH,
) -> Iterator[tuple[DeadlineOutcome | None, ClockKey]]:
    """Every clock ``lst.flt`` selects, in (instant, dispute id, name) order (the reverse
    with ``lst.descending``; ``lst.sort`` is not read) after ``after``, with its outcome at
    ``lst.now`` when the rule gives it ``lst.flt.state`` (None otherwise: the clock was
    read, and did not match). Reads ``batch`` clocks and their disputes' chains at a
    time."""
    flt, now = lst.flt, lst.now
    cursor = after
    while True:
        keys = src.queries.clock_keys(now, flt, cursor, batch, lst.descending)
        if not keys:
            return
        chains = src.queries.chains_of(list(dict.fromkeys(k[1] for k in keys)))
        found = {(o.dispute_id, o.name): o for o in outcomes_of(
            chains, now, src.ladders, src.calendars, timedelta(seconds=flt.at_risk_s))}
        for k in keys:
            o = found.get((k[1], k[2]))
            yield (o if o is not None and _keep(o, flt.state) else None), k
        if len(keys) < batch:
            return
        cursor = keys[-1]


@dataclass(frozen=True, slots=True)
class DeadlinePage:
    """One page of a deadline list: its rows, the keyset to go on from (None: the list
    ends here) and how many clocks were read for it."""

    rows: list[DeadlineOutcome]
    next_key: ClockKey | None
    scanned: int


def deadline_page(
    src: DeadlineSources, lst: DeadlineList, after: ClockKey | None, limit: int,
    scan_cap: int = SCAN_CAP,
) -> DeadlinePage:
    """Up to ``limit`` outcomes of :func:`walk`; stops early after ``scan_cap`` clocks
    (the page then holds fewer rows and a keyset to go on from)."""
    rows: list[DeadlineOutcome] = []
    last: ClockKey | None = None
    scanned = 0
    for o, key in walk(src, lst, after):
        if o is not None:
            if len(rows) == limit:
                return DeadlinePage(rows, last, scanned)
            rows.append(o)
        scanned += 1
        last = key
        if scanned >= scan_cap:
            return DeadlinePage(rows, last, scanned)
    return DeadlinePage(rows, None, scanned)


def count_state(src: DeadlineSources, flt: ClockFilter, now: datetime) -> int:
    """How many clocks have ``flt.state`` (``open_miss`` or ``at_risk``) at ``now``: those
    of disputes not ended counted by the database (open there means binding: no action
    met or ended it), those of ended disputes (only deadlines the resolution does not
    meet can be open) decided by the rule one by one."""
    live = src.queries.clock_count(now, replace(flt, ended=False), 1 << 62)
    ended = sum(o is not None for o, _k in walk(
        src, DeadlineList(replace(flt, ended=True), now)))
    return live + ended


def period_counts(
    src: DeadlineSources, since: datetime | None, until: datetime | None, now: datetime,
    cap: int = COUNT_CAP,
) -> dict[str, int] | None:
    """Outcomes per state of the clocks in ``[since, until)`` at ``now``, or None when
    more than ``cap`` clocks fall there (not computed: the lists page through them)."""
    flt = ClockFilter(since=since, until=until)
    if src.queries.clock_count(now, flt, cap + 1) > cap:
        return None
    counts = dict.fromkeys(STATUSES, 0)
    for o, _k in walk(src, DeadlineList(flt, now), batch=1000):
        if o is not None:
            counts[o.status] += 1
    return counts


_NEVER = datetime.max.replace(tzinfo=UTC)


def _at(o: DeadlineOutcome) -> datetime:
    return _NEVER if o.deadline is None else o.deadline


SORT_KEYS: dict[str, Callable[[DeadlineOutcome], Any]] = {
    "deadline_at": _at,
    "late": lambda o: (-1.0 if o.late_s is None else o.late_s, _at(o)),
    "dispute": lambda o: (o.external_id or "", str(o.dispute_id)),
    "ladder": lambda o: (o.ladder, o.ladder_version, _at(o)),
    "deadline": lambda o: (o.name, _at(o)),
    "tier": lambda o: (o.tier, _at(o)),
}


@dataclass(frozen=True, slots=True)
class Selection:
    """Which outcomes :func:`select` keeps and in which order: ``status`` (one of
    :data:`STATUSES`), ``ladder`` (name) and ``deadline`` (name), None = any; ``sort``: a
    key of :data:`SORT_KEYS`, then dispute id and name; ``descending``: the reverse."""

    status: str | None = None
    ladder: str | None = None
    deadline: str | None = None
    sort: str = "deadline_at"
    descending: bool = False


def select(
    outcomes: Sequence[DeadlineOutcome], sel: Selection = Selection(),
) -> list[DeadlineOutcome]:
    """Filter by status / ladder name / deadline name and sort (:class:`Selection`).

    Raises:
        InvalidInput: unknown status or sort key.
    """
    status, ladder, deadline, sort = sel.status, sel.ladder, sel.deadline, sel.sort
    if status is not None and status not in STATUSES:
        raise InvalidInput(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    if sort not in SORT_KEYS:
        raise InvalidInput(f"sort must be one of {', '.join(SORT_KEYS)}, got {sort!r}")
    rows = [o for o in outcomes
            if (status is None or o.status == status)
            and (ladder is None or o.ladder == ladder)
            and (deadline is None or o.name == deadline)]
    key = SORT_KEYS[sort]
    return sorted(rows, key=lambda o: (key(o), str(o.dispute_id), o.name),
                  reverse=sel.descending)


def late_cells(o: DeadlineOutcome) -> tuple[str, str]:
    """(hours with 2 decimals, business days) of a row. Only a missed deadline is late:
    both cells are blank for any other state (met, at_risk, pending, undetermined), and
    :data:`UNKNOWN` for a miss whose lateness is not known (missed per the source), never
    0."""
    if o.status != DeadlineState.MISSED:
        return "", ""
    if o.late_s is None or o.late_business_days is None:
        return UNKNOWN, UNKNOWN
    return f"{o.late_s / 3600:.2f}", str(o.late_business_days)


def row_of(o: DeadlineOutcome, zone: ZoneInfo) -> dict[str, str]:
    """The CSV / JSON row (:data:`CSV_COLUMNS`), instants in ``zone`` with their offset."""
    def at(t: datetime | None) -> str:
        return "" if t is None else t.astimezone(zone).isoformat()

    hours, days = late_cells(o)
    return {
        "dispute_id": str(o.dispute_id), "external_id": o.external_id or "",
        "ladder": o.ladder_key, "deadline": o.name, "citation": o.citation,
        "deadline_at": at(o.deadline), "status": o.status, "basis": o.basis or "",
        "met_or_missed_at": at(o.met_or_missed_at), "action": o.action or "",
        "action_at": at(o.action_at), "actor": o.actor or "",
        "action_recorded_at": at(o.action_recorded_at), "late_hours": hours,
        "late_business_days": days, "tier_at_deadline": o.tier,
    }


def json_row_of(o: DeadlineOutcome, zone: ZoneInfo) -> dict[str, object]:
    """:func:`row_of` with typed lateness for JSON: ``late_hours`` a number (2 decimals),
    ``late_business_days`` an integer, both null unless the deadline is missed, and null
    when a miss's lateness is not known (missed per the source)."""
    row: dict[str, object] = dict(row_of(o, zone))
    if o.status != DeadlineState.MISSED:
        row["late_hours"] = row["late_business_days"] = None
        return row
    unknown = o.late_s is None or o.late_business_days is None
    row["late_hours"] = None if o.late_s is None else round(o.late_s / 3600, 2)
    row["late_business_days"] = None if unknown else o.late_business_days
    return row


def to_csv(outcomes: Iterable[DeadlineOutcome], zone: ZoneInfo, *, bom: bool = False) -> str:
    """CSV text (:data:`CSV_COLUMNS`): instants in ``zone`` with their offset, written by
    the one CSV writer (``domain.csv_cells.csv_text``: formula injection neutralised, CRLF,
    ``bom`` = UTF-8 byte order mark first)."""
    rows = (row_of(o, zone) for o in outcomes)
    return csv_text(CSV_COLUMNS, ([row[c] for c in CSV_COLUMNS] for row in rows), bom=bom)


def csv_chunks(outcomes: Iterable[DeadlineOutcome], zone: ZoneInfo, *, bom: bool = False,
               rows_per_chunk: int = 500) -> Iterator[str]:
    """:func:`to_csv` in pieces: the header with the first row, then ``rows_per_chunk``
    rows at a time, for a download that starts as soon as its first row is known."""
    buf = io.StringIO(newline="")
    writer = CsvWriter(buf, CSV_COLUMNS, bom=bom)
    for n, o in enumerate(outcomes, 1):
        row = row_of(o, zone)
        writer.row([row[c] for c in CSV_COLUMNS])
        if n % rows_per_chunk == 1 or rows_per_chunk == 1:
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue()


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


def tier_load_of(counts: Iterable[TierCount], ladders: LadderLookup) -> list[TierLoad]:
    """:func:`tier_load` from the database's counts per (ladder, version, tier)
    (``ConsoleQueries.tier_counts``): versions of one ladder added up per tier, the rank
    from the first version that knows the tier (unknown tiers last)."""
    acc: dict[tuple[str, str], list[int]] = {}
    ranks: dict[tuple[str, str], int] = {}
    for c in sorted(counts, key=lambda c: (c.ladder, -c.ladder_version, c.tier)):
        key = (c.ladder, c.tier)
        if ranks.get(key, 1 << 30) == 1 << 30:
            try:
                ranks[key] = ladders(c.ladder, c.ladder_version).tier(c.tier).rank
            except EscalationError:  # unknown ladder or tier: listed last
                ranks[key] = 1 << 30
        row = acc.setdefault(key, [0, 0, 0, 0])
        for i, n in enumerate((c.pending, c.due_hour, c.due_day, c.overdue)):
            row[i] += n
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


# --------------------------------------------------------------------------- from the rollup
def _outcomes_at(
    src: DeadlineSources, keys: Sequence[ClockKey], now: datetime, state: str | None,
) -> list[DeadlineOutcome]:
    """The outcomes of ``keys`` at ``now`` in their order, from those disputes' chains
    only: a key whose outcome no longer has ``state`` (the ledger moved since the refresh
    that stored it) is left out."""
    if not keys:
        return []
    chains = src.queries.chains_of(list(dict.fromkeys(k[1] for k in keys)))
    found = {(o.dispute_id, o.name): o
             for o in outcomes_of(chains, now, src.ladders, src.calendars)}
    out = []
    for at, did, name in keys:
        o = found.get((did, name))
        if o is not None and o.deadline == at and _keep(o, state):
            out.append(o)
    return out


def rolled_page(
    src: DeadlineSources, rolled: RolledDeadlines, lst: DeadlineList,
    after: ClockKey | None, limit: int,
) -> DeadlinePage:
    """Up to ``limit`` outcomes of the deadlines ``lst.flt`` selects in the rollup, in
    (instant, dispute id, name) order (the reverse with ``lst.descending``; ``lst.sort``
    is not read) after ``after``: one index range scan of ``limit + 1`` keys, then the
    outcomes (basis, action, actor, lateness) of those disputes only, at ``lst.now`` (the
    instant of the refresh just made). The page costs what it returns, whatever the
    ledger holds or how rare the state is."""
    keys = rolled.keys(lst.flt, after, limit + 1, lst.descending)
    rows = _outcomes_at(src, keys[:limit], lst.now, lst.flt.state)
    nxt = keys[limit - 1] if len(keys) > limit else None
    return DeadlinePage(rows, nxt, len(keys[:limit]))


def rolled_walk(
    src: DeadlineSources, rolled: RolledDeadlines, lst: DeadlineList,
    after: ClockKey | None = None, sizes: tuple[int, int] = (50, 1000),
) -> Iterator[DeadlineOutcome]:
    """Every outcome :func:`rolled_page` would give, page after page (a CSV download):
    ``sizes[0]`` keys and their chains first, then ``sizes[1]`` at a time (the first rows
    come as quickly as a page of the list; memory stays that of one batch)."""
    first, batch = sizes
    cursor, size = after, min(first, batch)
    while True:
        keys = rolled.keys(lst.flt, cursor, size, lst.descending)
        yield from _outcomes_at(src, keys, lst.now, lst.flt.state)
        if len(keys) < size:
            return
        cursor, size = keys[-1], batch


def rolled_sorted(
    src: DeadlineSources, rolled: RolledDeadlines, lst: DeadlineList, offset: int,
    limit: int,
) -> list[DeadlineOutcome]:
    """Rows ``offset`` to ``offset + limit`` of the list sorted by ``lst.sort`` (as
    :func:`select` sorts; ``lst.descending``: the reverse), ordered by the database, with
    their outcomes at ``lst.now``."""
    keys = rolled.sorted_keys(lst, offset, limit)
    return _outcomes_at(src, keys, lst.now, lst.flt.state)


def rolled_counts(rolled: RolledDeadlines, since: datetime | None,
                  until: datetime | None) -> dict[str, int]:
    """Outcomes per state (every one of :data:`STATUSES`, 0 when none) of the deadlines
    with their instant in ``[since, until)``, as the rollup stores them: the overview's
    period figures, whatever the period's size."""
    got = rolled.counts(since, until, STATUSES)
    return {s: got.get(s, 0) for s in STATUSES}
