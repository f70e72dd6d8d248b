"""SLA compliance report per ladder and tier, from the ledger alone.

Definitions (docs/audit.md "SLA report"); the window is ``[since, until)`` in UTC:

* a *tier stay* starts with a ledger row moving the dispute into the tier (``ENQUEUED``, or
  ``PROMOTED`` with ``to_tier`` = the tier) and ends with the next ``PROMOTED``/``TERMINAL``
  (``from_tier`` = the tier), ``RESOLVED`` or ``CANCELLED`` row of the dispute;
* **entered**: stays whose start was decided in the window;
* **breached**: stays ended by an escalation (PROMOTED or TERMINAL: the tier's SLA window
  elapsed) decided in the window;
* **promoted on time**: breached stays whose escalation was decided no later than
  ``grace_s`` seconds (default 60) after *that tier's* due time (``due_at`` of the
  escalation row, which is the due time of the tier being left). A tier entered already
  overdue (its due time at or before the instant it was entered: the scheduler clamps a due
  time whose regulatory cap had already passed to the entry instant, and an imported dispute
  whose window had already elapsed is entered at its due time) is never on time: its SLA
  was breached before it could act. **promoted late** = breached - on time;
* **resolved**: resolutions recorded in the tier in the window: stays ended by RESOLVED
  (``resolve``) or CANCELLED (``cancel``: the dispute was resolved in that tier), and a
  RESOLVED row after the TERMINAL row that ended a stay in the terminal tier (that stay also
  counts as breached: its window elapsed before the resolution);
* **time in tier**: for stays ended in the window, end ``decided_at`` - the instant the
  escalation *entered the tier*, in seconds. For a later tier that is the promotion's
  ``decided_at``; for the first tier it is the escalation's ``entered_tier_at`` (the dispute's
  opening instant, which may be long before it was enqueued), taken from the ENQUEUED row's
  ``details["entered_tier_at"]`` when recorded there, else from the projection
  (``escalation_state.entered_tier_at``) while the dispute has not left its first tier, else
  (first tier already left, nothing recorded) the ENQUEUED row's ``decided_at``; median
  (``statistics.median``: mean of the two middle values for an even count) and p95
  (nearest rank: the ``ceil(0.95 n)``-th smallest);
* **regulatory deadlines**: **every** clock of each dispute that falls in the window
  (anchor clocks from the ENQUEUED row's details, clocks an action started or moved from
  the recorded actions, rows older than those details: the projection's clocks, else the
  last ``regulatory_deadline``), counted in the tier the dispute was in at the deadline (the
  first tier when the deadline passed before the dispute was even enqueued). Its state is
  ``deadline_outcomes.outcomes_of``, the console's function (``domain.obligations``,
  docs/adr/0010-obligations-and-resolution.md): *met* when an action the deadline's
  ``met_by`` names happened before it (on record, or per an imported source), *missed*
  when it passed without that (lateness unknown when only the source says so), *at_risk*
  / *pending* while open (within 48 h of ``now`` / later), *undetermined* when the source
  says nothing usable. Each one is also listed per dispute (:class:`DeadlineOutcome`):
  name, citation, instant in the institution's zone, the basis and the action that met it
  (its instant and actor), and the lateness in hours and in business days of the
  institution's calendar (business days after the deadline's local date up to and
  including the local date of the late action, or ``now`` while still open).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from itertools import groupby
from typing import Any
from zoneinfo import ZoneInfo

from escalation.domain.calendars import INSTITUTION, CalendarRegistry, builtin_calendars
from escalation.domain.csv_cells import csv_text
from escalation.domain.errors import InvalidParameter, LadderError
from escalation.domain.ladder import Ladder
from escalation.domain.obligations import DeadlineState
from escalation.domain.timeutil import require_aware
from escalation.ports import ChainEvent, DeadlineChain, LedgerReports
from escalation.service_layer import deadline_outcomes as dl
from escalation.service_layer.deadline_outcomes import LadderLookup

DEFAULT_GRACE_S = 60
CSV_COLUMNS: tuple[str, ...] = (
    "ladder",
    "tier",
    "entered",
    "promoted_on_time",
    "promoted_late",
    "breached",
    "resolved",
    "median_time_in_tier_s",
    "p95_time_in_tier_s",
    "regulatory_met",
    "regulatory_missed",
    "regulatory_at_risk",
    "regulatory_pending",
    "regulatory_undetermined",
)

@dataclass(slots=True)
class TierFigures:
    """Figures of one (ladder, tier); durations in seconds."""

    ladder: str
    tier: str
    entered: int = 0
    promoted_on_time: int = 0
    promoted_late: int = 0
    resolved: int = 0
    regulatory_met: int = 0
    regulatory_missed: int = 0
    regulatory_at_risk: int = 0
    regulatory_pending: int = 0
    regulatory_undetermined: int = 0
    durations: list[float] = field(default_factory=list)

    @property
    def breached(self) -> int:
        """Stays ended by an escalation (on time + late)."""
        return self.promoted_on_time + self.promoted_late

    @property
    def median_s(self) -> float | None:
        """Median time in tier (s), None without ended stays."""
        return statistics.median(self.durations) if self.durations else None

    @property
    def p95_s(self) -> float | None:
        """95th percentile time in tier (s), nearest-rank; None without ended stays."""
        if not self.durations:
            return None
        ordered = sorted(self.durations)
        return ordered[math.ceil(0.95 * len(ordered)) - 1]

    def as_row(self) -> dict[str, Any]:
        """The CSV/JSON row (:data:`CSV_COLUMNS`)."""
        return {
            "ladder": self.ladder,
            "tier": self.tier,
            "entered": self.entered,
            "promoted_on_time": self.promoted_on_time,
            "promoted_late": self.promoted_late,
            "breached": self.breached,
            "resolved": self.resolved,
            "median_time_in_tier_s": duration_text(self.median_s),
            "p95_time_in_tier_s": duration_text(self.p95_s),
            "regulatory_met": self.regulatory_met,
            "regulatory_missed": self.regulatory_missed,
            "regulatory_at_risk": self.regulatory_at_risk,
            "regulatory_pending": self.regulatory_pending,
            "regulatory_undetermined": self.regulatory_undetermined,
        }

    def as_json(self) -> dict[str, Any]:
        """The JSON row (``report sla --json``, ``GET /v1/reports/sla``): :meth:`as_row`
        with ``median_time_in_tier_s`` and ``p95_time_in_tier_s`` as JSON numbers of
        seconds (the CSV's digits), or null when no stay ended in the window."""
        row = self.as_row()
        row["median_time_in_tier_s"] = _json_num(self.median_s)
        row["p95_time_in_tier_s"] = _json_num(self.p95_s)
        return row

    def count(self, state: str) -> None:
        """Count one deadline in ``state`` (one of ``deadline_outcomes.STATUSES``)."""
        name = f"regulatory_{state}"
        setattr(self, name, getattr(self, name) + 1)


_MS = Decimal("0.001")


def duration_text(value: float | None) -> str:
    """A duration (s) to the millisecond, as text; "" for None.

    Stay durations are whole microseconds, so a median (the mean of the two middle values)
    is a multiple of half a microsecond; computed as ``(a + b) / 2`` in Python or as ``a +
    (b - a) * 0.5`` by PostgreSQL's ``percentile_cont`` it may differ in the last bit of
    the float, which decided which way an exact half millisecond rounded (``29648.3685``
    shown as ``.369`` from one and ``.368`` from the other). The value is therefore first
    rounded to a tenth of a microsecond, which removes that noise and keeps every half
    microsecond, then to the millisecond, half to even.
    """
    if value is None:
        return ""
    return str(Decimal(repr(round(value, 7))).quantize(_MS, rounding=ROUND_HALF_EVEN))


def _json_num(value: float | None) -> float | None:
    """A duration (s) for JSON: the number the CSV cell shows (to the millisecond, the same
    digits: ``227.367``), None (JSON null) without ended stays."""
    return None if value is None else float(duration_text(value))


@dataclass(frozen=True, slots=True)
class DeadlineOutcome:
    """One regulatory deadline of one dispute (``report sla --missed``, ``audit search
    --deadlines``): the console's :class:`deadline_outcomes.DeadlineOutcome` and the zone
    its instants are shown in (the dispute's institution zone).

    Attributes:
        outcome: the state, basis, action, lateness and tier (``deadline_outcomes``).
        zone: the institution's zone of the dispute.
    """

    outcome: dl.DeadlineOutcome
    zone: ZoneInfo

    @property
    def name(self) -> str:
        """The deadline's name."""
        return self.outcome.name

    @property
    def status(self) -> str:
        """One of ``deadline_outcomes.STATUSES``."""
        return self.outcome.status

    @property
    def deadline(self) -> datetime | None:
        """Aware UTC instant (None: unknown)."""
        return self.outcome.deadline

    @property
    def dispute_id(self) -> str:
        """The dispute's UUID as text."""
        return str(self.outcome.dispute_id)

    def as_row(self) -> dict[str, Any]:
        """CSV row (:data:`MISSED_COLUMNS`, the console's CSV columns)."""
        return dl.row_of(self.outcome, self.zone)

    def as_json(self) -> dict[str, Any]:
        """JSON row: :meth:`as_row` with typed lateness (numbers, null when unknown)."""
        return dl.json_row_of(self.outcome, self.zone)


@dataclass(frozen=True, slots=True)
class SlaReport:
    """The report: window, grace and figures sorted by ladder then tier, and every
    regulatory deadline in the window per dispute (``deadlines``)."""

    since: datetime
    until: datetime
    grace_s: int
    tiers: list[TierFigures]
    deadlines: list[DeadlineOutcome] = field(default_factory=list)

    @property
    def missed(self) -> list[DeadlineOutcome]:
        """The missed deadlines, by deadline instant."""
        return [d for d in self.deadlines if d.status == DeadlineState.MISSED]


@dataclass(frozen=True, slots=True)
class ReportSla:
    """The SLA report of one window (the command of :func:`build` and :func:`compute`).

    ``since``, ``until``: aware window ``[since, until)``; ``grace_s``: on-time grace in
    seconds (>= 0); ``now``: aware instant deciding whether an unmet deadline has passed
    (missed) or is still pending (None: :func:`build` takes the database clock,
    :func:`compute` ``until``). Checked by :func:`check_window` before any row is read.
    """

    since: datetime
    until: datetime
    grace_s: int = DEFAULT_GRACE_S
    now: datetime | None = None


@dataclass(frozen=True, slots=True)
class DisputeDeadlines:
    """One dispute's regulatory deadlines (the command of :func:`dispute_deadlines`).

    ``dispute_id``: the dispute (UUID); ``name``: only the deadline of this name (None:
    every one); ``now``: aware instant of the states (None: the database clock).
    """

    dispute_id: Any
    name: str | None = None
    now: datetime | None = None


def compute(rows: Iterable[Mapping[Any, Any]], cmd: ReportSla,
            calendars: CalendarRegistry | None = None,
            ladders: LadderLookup | None = None) -> SlaReport:
    """Compute the report from ledger rows (ordered by dispute then seq). Pure.

    Args:
        rows: ledger rows with the columns of ``_ROWS``; the optional keys
            ``details_entered_at`` (ISO 8601 text) and ``state_entered_tier_at`` (aware
            datetime) on the ENQUEUED row give the first tier's entry instant.
        cmd: the window, grace and instant (:class:`ReportSla`; ``now`` defaults to
            ``until``: every deadline in the window has passed).
        calendars: calendar registry for business-day lateness (default: built-ins).
        ladders: ``(name, version) -> Ladder`` for the deadlines' ``met_by`` and clocks
            (None: every ladder unknown, each deadline met by the resolution only).

    Raises:
        InvalidInput: naive bounds, ``since >= until`` or negative grace.
    """
    grace_s = cmd.grace_s
    since, until = check_window(cmd.since, cmd.until, grace_s)
    now = until if cmd.now is None else require_aware(cmd.now, "now")
    figures: dict[tuple[str, str], TierFigures] = {}
    outcomes: list[DeadlineOutcome] = []

    def fig(ladder: str, tier: str) -> TierFigures:
        return figures.setdefault((ladder, tier), TierFigures(ladder, tier))

    def inside(t: datetime | None) -> bool:
        return t is not None and since <= t < until

    for _d, chain_iter in groupby(rows, key=lambda r: r["dispute_id"]):
        chain = list(chain_iter)
        for ev in stay_events(chain, grace_s):
            if ev.duration_s is not None:  # the tier of an ended stay is listed, even at 0
                fig(ev.ladder, ev.tier)
            if inside(ev.at):
                ev.count_in(fig(ev.ladder, ev.tier))
        outcomes.extend(_regulatory(deadline_items(chain, now, calendars, ladders), inside,
                                    fig))
    tiers = sorted(figures.values(), key=lambda f: (f.ladder, f.tier))
    outcomes.sort(key=lambda o: (dl.SORT_KEYS["deadline_at"](o.outcome), o.dispute_id, o.name))
    return SlaReport(since, until, grace_s, tiers, outcomes)


def check_window(since: datetime, until: datetime,
                 grace_s: int = DEFAULT_GRACE_S) -> tuple[datetime, datetime]:
    """The report's parameters checked (before anything is read): aware bounds,
    ``since < until``, ``grace_s >= 0``; returns the bounds.

    Raises:
        InvalidInput: naive bounds. InvalidParameter: ``since >= until`` or a negative
            grace, named by each interface's own spelling (``--from`` / ``from``).
    """
    since = require_aware(since, "from")
    until = require_aware(until, "to")
    if since >= until:
        raise InvalidParameter("{from} ({since}) must be before {to} ({until})", "from", "to",
                               since=since.isoformat(), until=until.isoformat())
    if grace_s < 0:
        raise InvalidParameter("{grace_s} must be >= 0 seconds, got {got}", "grace_s",
                               got=grace_s)
    return since, until


STAY_KINDS: tuple[str, ...] = ("entered", "on_time", "late", "resolved")
"""The kinds of :class:`StayEvent`."""


@dataclass(frozen=True, slots=True)
class StayEvent:
    """One thing a tier stay contributes to the report, at the instant it counts.

    Attributes:
        kind: ``entered`` (a stay started), ``on_time`` / ``late`` (a stay ended by an
            escalation, within the grace of the tier's due time or not), ``resolved`` (a
            stay ended by RESOLVED or CANCELLED, or a resolution after the TERMINAL row
            that ended a stay in the terminal tier).
        ladder, tier: where it counts.
        at: the ledger row's ``decided_at`` (the report's window selects on it).
        duration_s: the stay's time in tier (s) when the event ends a stay; else None.
    """

    kind: str
    ladder: str
    tier: str
    at: datetime
    duration_s: float | None = None

    def count_in(self, figures: TierFigures) -> None:
        """Add this event to ``figures`` (its kind's count, its duration)."""
        if self.duration_s is not None:
            figures.durations.append(self.duration_s)
        if self.kind == "entered":
            figures.entered += 1
        elif self.kind == "on_time":
            figures.promoted_on_time += 1
        elif self.kind == "late":
            figures.promoted_late += 1
        else:
            figures.resolved += 1


def stay_events(chain: Sequence[Mapping[Any, Any]], grace_s: int) -> list[StayEvent]:
    """One dispute's tier stays (its ledger rows by seq) as events: an ENQUEUED or PROMOTED
    row into a tier starts a stay (``entered``), the next PROMOTED, TERMINAL, RESOLVED or
    CANCELLED row ends it with the stay's duration (s), as ``resolved`` (RESOLVED or
    CANCELLED), ``on_time`` or ``late``. A RESOLVED row after TERMINAL ends no stay
    (TERMINAL already ended it, as breached) but is a resolution recorded in the terminal
    tier: ``resolved`` there, without a second duration. Each event is at its row's
    ``decided_at``; the report counts those inside its window (the rollup keeps them all)."""
    out: list[StayEvent] = []
    stay: Mapping[Any, Any] | None = None
    stay_start: datetime | None = None
    terminal: Mapping[Any, Any] | None = None  # the stay a TERMINAL row ended
    for row in chain:
        event = row["event"]
        if terminal is not None and event == "RESOLVED":
            out.append(StayEvent("resolved", terminal["ladder"], terminal["to_tier"],
                                 row["decided_at"]))
            terminal = None
        if stay is not None and stay_start is not None and event in (
            "PROMOTED", "TERMINAL", "RESOLVED", "CANCELLED"
        ):
            if event in ("RESOLVED", "CANCELLED"):
                kind = "resolved"
            elif _on_time(row["decided_at"], row["due_at"], stay_start, grace_s):
                kind = "on_time"
            else:
                kind = "late"
            out.append(StayEvent(kind, stay["ladder"], stay["to_tier"], row["decided_at"],
                                 (row["decided_at"] - stay_start).total_seconds()))
            terminal = stay if event == "TERMINAL" else None
            stay = None
        if event in ("ENQUEUED", "PROMOTED") and row["to_tier"] is not None:
            stay = row
            stay_start = (
                _first_tier_entry(row, chain) if event == "ENQUEUED" else row["decided_at"]
            )
            out.append(StayEvent("entered", row["ladder"], row["to_tier"], row["decided_at"]))
    return out


def _on_time(decided: datetime, due: datetime | None, entered: datetime, grace_s: int) -> bool:
    """True when an escalation out of a tier was decided within ``grace_s`` of that tier's
    due time; a tier whose due time is at or before its entry was entered already overdue
    (clamped due time), so leaving it is never on time."""
    if due is None or due <= entered:
        return False
    return (decided - due).total_seconds() <= grace_s


def _first_tier_entry(enqueued: Mapping[Any, Any],
                      chain: Sequence[Mapping[Any, Any]]) -> datetime:
    """Instant the escalation entered its first tier (see the module docstring)."""
    recorded = enqueued.get("details_entered_at")
    if recorded:
        return datetime.fromisoformat(str(recorded))
    state_entered = enqueued.get("state_entered_tier_at")
    left_first = any(r["event"] in ("PROMOTED", "TERMINAL") for r in chain)
    if state_entered is not None and not left_first:
        entered: datetime = state_entered
        return entered
    first: datetime = enqueued["decided_at"]
    return first


def _unknown(name: str, version: int) -> Ladder:
    raise LadderError(f"unknown ladder {name}@{version}")


def as_chain(chain: Sequence[Mapping[Any, Any]]) -> DeadlineChain:
    """One dispute's ledger rows (:data:`adapters.report_queries.SLA_ROWS` columns, by seq)
    as the console's :class:`~escalation.ports.DeadlineChain`: the pinned version and the
    institution from the projection when given, else from the rows."""
    first, last = chain[0], chain[-1]
    enq = first.get("enq_details") or {}
    inst = (enq.get("institution") or {}) if isinstance(enq, Mapping) else {}
    events = tuple(
        ChainEvent(int(r["seq"]), str(r["event"]), r["decided_at"], r["from_tier"],
                   r["to_tier"], str(r.get("actor") or ""),
                   r.get("details") if r.get("details") is not None
                   else (r.get("enq_details") if r["event"] == "ENQUEUED" else None))
        for r in chain)
    version = first.get("state_ladder_version") or next(
        (r["ladder_version"] for r in reversed(chain) if r.get("ladder_version")), 0)
    return DeadlineChain(
        first["dispute_id"], first.get("external_id"),
        str(first.get("state_ladder") or last["ladder"]), int(version),
        _clocks_json(first.get("state_clocks"), chain), events,
        first.get("state_institution_tz") or inst.get("timezone"),
        first.get("state_institution_calendar") or inst.get("calendar"))


def _clocks_json(
    value: Any, chain: Sequence[Mapping[Any, Any]],
) -> tuple[tuple[str, datetime], ...]:
    """The projection's clocks (JSON ``[[name, instant], ...]``), else the last
    ``regulatory_deadline`` of the rows."""
    items = json.loads(value) if isinstance(value, str) else value
    if items:
        return tuple((str(n), datetime.fromisoformat(str(at)).astimezone(UTC))
                     for n, at in items)
    last = next((r["regulatory_deadline"] for r in reversed(chain)
                 if r.get("regulatory_deadline")), None)
    return () if last is None else (("regulatory_deadline", last),)


def deadline_items(
    chain: Sequence[Mapping[Any, Any]], now: datetime,
    calendars: CalendarRegistry | None, ladders: LadderLookup | None,
) -> list[tuple[DeadlineOutcome, str]]:
    """Every regulatory deadline of one dispute with a known instant, as of ``now``, with
    the ladder it counts in (the dispute's ladder at the deadline: the first row's when the
    deadline passed before the dispute was even enqueued). The report counts those inside
    its window in ``(ladder, outcome.tier)``."""
    cals = calendars if calendars is not None else builtin_calendars()
    deadline_chain = as_chain(chain)
    zone = _zone_of(deadline_chain, cals)
    out = []
    for o in dl.outcomes_of([deadline_chain], now, ladders or _unknown, cals):
        if o.deadline is None:
            continue
        before = [r for r in chain if r["decided_at"] <= o.deadline]
        at_deadline = before[-1] if before else chain[0]
        out.append((DeadlineOutcome(o, zone), str(at_deadline["ladder"])))
    return out


def _regulatory(items: Iterable[tuple[DeadlineOutcome, str]], inside: Any,
                fig: Any) -> list[DeadlineOutcome]:
    out = []
    for item, ladder in items:
        if inside(item.deadline):
            fig(ladder, item.outcome.tier).count(item.status)
            out.append(item)
    return out


RollupRow = tuple[str, str, str, datetime, "float | None", "str | None", "str | None"]
"""One row of the SLA rollup: (kind, ladder, tier, instant it counts at, duration in s or
None, deadline state or None, deadline name or None); kind is one of :data:`STAY_KINDS`
or ``deadline``."""


def rollup_rows(chain: Sequence[Mapping[Any, Any]], now: datetime,
                calendars: CalendarRegistry | None, ladders: LadderLookup | None,
                grace_s: int = DEFAULT_GRACE_S) -> list[RollupRow]:
    """What one dispute contributes to the report in any window: its stay events
    (:func:`stay_events` at ``grace_s``) and its deadlines with their state as of ``now``
    (:func:`deadline_items`): the same functions :func:`compute` counts with, so the
    rollup's figures for a window are the full recount's (ADR 0033)."""
    rows: list[RollupRow] = [(e.kind, e.ladder, e.tier, e.at, e.duration_s, None, None)
                             for e in stay_events(chain, grace_s)]
    for item, ladder in deadline_items(chain, now, calendars, ladders):
        assert item.deadline is not None  # noqa: S101 - deadline_items keeps known instants
        rows.append(("deadline", ladder, item.outcome.tier, item.deadline, None, item.status,
                     item.name))
    return rows


def _zone_of(chain: DeadlineChain, calendars: CalendarRegistry) -> ZoneInfo:
    """The dispute's institution zone (the registry's institution zone by default)."""
    if chain.institution_tz:
        try:
            return ZoneInfo(chain.institution_tz)
        except (ValueError, KeyError):
            pass
    tz = getattr(calendars.get(INSTITUTION), "tz", None)
    return tz if isinstance(tz, ZoneInfo) else ZoneInfo("UTC")


def build(cmd: ReportSla, source: LedgerReports,
          calendars: CalendarRegistry | None = None,
          ladders: LadderLookup | None = None) -> SlaReport:
    """Load the ledger rows of disputes active in ``cmd``'s window and :func:`compute`.

    ``source`` (the ``LedgerReports`` port; adapter ``adapters.report_queries.
    PostgresReports``) gives the rows. ``cmd.now`` (aware UTC) defaults to the database
    clock: deadlines after it are open. ``calendars``: registry for business-day lateness
    (default: built-ins). ``ladders``: as for :func:`compute` (pass the deployment's, or
    every deadline is read as met by the resolution only).

    Raises:
        InvalidInput: naive ``since`` / ``until``, ``since >= until`` or a negative grace
            (:func:`check_window`, before any row is read).
    """
    since, until = check_window(cmd.since, cmd.until, cmd.grace_s)
    db_now, rows = source.sla_rows(since, until)
    return compute(rows, ReportSla(since, until, cmd.grace_s,
                                   db_now if cmd.now is None else cmd.now), calendars, ladders)


MISSED_COLUMNS: tuple[str, ...] = dl.CSV_COLUMNS
"""The columns of ``report sla --missed`` and ``audit search --deadlines``: the console's
deadline CSV columns."""


def missed_csv(report: SlaReport, *, bom: bool = False) -> str:
    """CSV of the missed deadlines (:data:`MISSED_COLUMNS`), by deadline instant, written by
    the one CSV writer (``domain.csv_cells.csv_text``: formula injection neutralised, CRLF,
    ``bom`` = UTF-8 byte order mark first)."""
    rows = (o.as_row() for o in report.missed)
    return csv_text(MISSED_COLUMNS, ([r.get(k) for k in MISSED_COLUMNS] for r in rows),
                    bom=bom)


def dispute_deadlines(
    cmd: DisputeDeadlines, source: LedgerReports,
    calendars: CalendarRegistry | None = None, ladders: LadderLookup | None = None,
) -> list[DeadlineOutcome]:
    """Every regulatory deadline of one dispute (optionally only ``name``), by
    ``deadline_outcomes.outcomes_of`` (the console's function: met / missed / at_risk /
    pending / undetermined, basis, action, lateness), clocks without a known instant
    included. Empty when the dispute has none.

    ``source``: the ``LedgerReports`` port (its ``dispute_rows``); ``now`` defaults to the
    database clock; ``ladders`` as for :func:`compute`."""
    name, now = cmd.name, cmd.now
    db_now, rows = source.dispute_rows(cmd.dispute_id)
    if not rows:
        return []
    at = db_now if now is None else now
    cals = calendars if calendars is not None else builtin_calendars()
    chain = as_chain(rows)
    zone = _zone_of(chain, cals)
    found = dl.outcomes_of([chain], at, ladders or _unknown, cals)
    found.sort(key=lambda o: (dl.SORT_KEYS["deadline_at"](o), o.name))
    return [DeadlineOutcome(o, zone) for o in found if name is None or o.name == name]


EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def to_csv(report: SlaReport, *, bom: bool = False) -> str:
    """CSV text: header :data:`CSV_COLUMNS`, one row per (ladder, tier), written by the one
    CSV writer (``domain.csv_cells.csv_text``; ``bom`` as for :func:`missed_csv`)."""
    rows = (f.as_row() for f in report.tiers)
    return csv_text(CSV_COLUMNS, ([r.get(k) for k in CSV_COLUMNS] for r in rows), bom=bom)


def grouped(report: SlaReport) -> dict[str, list[dict[str, Any]]]:
    """Rows per ladder (for JSON output: :meth:`TierFigures.as_json`)."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in report.tiers:
        out[f.ladder].append(f.as_json())
    return dict(out)
