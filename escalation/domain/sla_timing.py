"""SLA timing rules (pure; docs/sla.md): regulatory caps, materiality window factors,
remaining time for pause/resume, warning instants, and the priority weight of a band.

Conventions (docs/sla.md):

* **Regulatory cap** (point 3): a tier's due time is never later than ``deadline - buffer``,
  where the buffer is counted in the regulatory rule's own unit and calendar. "Minus N
  business days" has no closed form, so the cap is the latest instant ``t`` with
  ``add(t, buffer) <= deadline`` (found by bisection to the millisecond; ``add`` is monotonic
  in its start, a property the calendar tests check).
* **Window factor** (point 5): a materiality band may shorten windows by ``window_factor``
  (0 < f <= 1); the scaled amount is ``floor(amount * f)``, at least 1 (rounding down fires
  earlier, never later).
* **Remaining time** (point 4): a window in calendar units keeps its remaining *elapsed*
  milliseconds; a window in business units keeps its remaining *open* milliseconds (time
  inside working hours of business days), so a pause over a weekend costs nothing.
* **Warnings** (point 6): a warning at fraction ``f`` of a tier's window is due at
  ``entered + f * window``, measured on the same basis (elapsed or open time).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from functools import lru_cache

from escalation.domain.calendars import (
    BusinessCalendar,
    Calendar,
    CalendarRegistry,
    SlaWindow,
    WindowUnit,
)
from escalation.domain.errors import InvalidInput
from escalation.domain.ladder import Ladder, MaterialityBand, RegulatoryDeadline, ResolvedDeadline
from escalation.domain.timeutil import from_ms, require_aware, to_ms

BUSINESS_UNITS = frozenset({WindowUnit.BUSINESS_DAYS, WindowUnit.BUSINESS_HOURS})
_MS = timedelta(milliseconds=1)


def calendar_of(window: SlaWindow, calendars: CalendarRegistry) -> Calendar:
    """The calendar a window counts in. Raises InvalidInput if unknown."""
    try:
        return calendars[window.calendar]
    except KeyError:
        raise InvalidInput(
            f"unknown calendar {window.calendar!r}; known: {', '.join(sorted(calendars))}"
        ) from None


def scaled_window(window: SlaWindow, factor: Decimal) -> SlaWindow:
    """``window`` shortened by a materiality band's ``factor`` (0 < factor <= 1).

    Returns ``SlaWindow(max(1, floor(amount * factor)), unit, calendar)``.

    Raises:
        InvalidInput: factor outside (0, 1].
    """
    if not Decimal(0) < factor <= Decimal(1):
        raise InvalidInput(f"window_factor must be in (0, 1], got {factor}")
    if factor == 1:
        return window
    amount = max(1, math.floor(Decimal(window.amount) * factor))
    return SlaWindow(amount, window.unit, window.calendar)


def band_for(ladder: Ladder, materiality: Decimal) -> MaterialityBand | None:
    """The ladder's band for ``materiality`` (highest ``min_amount <= materiality``), or None."""
    return ladder.band_for(materiality)


def tier_window(ladder: Ladder, tier_id: str, materiality: Decimal) -> SlaWindow:
    """The SLA window of ``tier_id`` for an escalation of ``materiality`` (band factor applied).

    Raises:
        UnknownTier: ``tier_id`` is not in ``ladder``.
    """
    window = ladder.tier(tier_id).window
    band = ladder.band_for(materiality)
    return window if band is None else scaled_window(window, band.window_factor)


def regulatory_cap(
    deadline: datetime | None, rule: RegulatoryDeadline | None, calendars: CalendarRegistry
) -> datetime | None:
    """The latest due time allowed by a regulatory deadline: ``deadline - rule.buffer``.

    Args:
        deadline: the escalation's aware regulatory deadline, or None (no cap).
        rule: the ladder's regulatory rule (its buffer, unit and calendar), or None.
        calendars: calendar registry.

    Returns:
        None without a deadline; ``deadline`` itself without a rule or with buffer 0; else the
        latest instant ``t`` (ms precision) with ``add(t, buffer, unit) <= deadline``.

    Raises:
        InvalidInput: naive deadline or unknown calendar.
    """
    if deadline is None:
        return None
    deadline = require_aware(deadline, "deadline")
    if rule is None or rule.buffer == 0:
        return deadline
    cal = calendar_of(rule.window, calendars)
    unit = rule.window.unit
    # Lower bound: an instant far enough before that add() surely ends before the deadline.
    span = timedelta(days=max(2, rule.buffer) * 4 + 30)
    lo_ms, hi_ms = to_ms(deadline - span), to_ms(deadline)
    if cal.add(from_ms(lo_ms), rule.buffer, unit) > deadline:  # pragma: no cover - defensive
        return from_ms(lo_ms)
    while hi_ms - lo_ms > 1:
        mid = (lo_ms + hi_ms) // 2
        if cal.add(from_ms(mid), rule.buffer, unit) <= deadline:
            lo_ms = mid
        else:
            hi_ms = mid
    return from_ms(lo_ms)


def deadline_values(
    ladder: Ladder, deadlines: tuple[tuple[str, datetime], ...],
    current: datetime | None = None,
) -> dict[str, datetime]:
    """An escalation's deadlines by name. Without recorded ``deadlines`` (rows written before
    multi-deadline ladders) the ``current`` regulatory deadline stands for the ladder's first
    rule."""
    values = dict(deadlines)
    if not values and current is not None and ladder.regulatory is not None:
        values[ladder.regulatory.name] = current
    return values


def resolve_deadlines(
    ladder: Ladder, anchor_at: datetime, calendars: CalendarRegistry,
    attributes: Mapping[str, object] | None = None,
) -> tuple[ResolvedDeadline, ...]:
    """Every regulatory deadline of ``ladder`` for an anchor event at ``anchor_at``, in the
    ladder's order (docs/sla.md "Several regulatory deadlines"), each with its aware UTC
    instant, its citation and the rule applied. A clock started by an action (``started_by``)
    has no anchor instant and is skipped (``domain.obligations.clocks`` places it once the
    action is recorded).

    Raises:
        InvalidInput: naive ``anchor_at``, an unknown calendar, or a dispute attribute the
            ladder needs is missing (``RegulatoryDeadline.needs``).
    """
    return tuple(d.resolve(anchor_at, calendars, attributes) for d in ladder.deadlines
                 if not d.started_by)


def tier_cap(
    ladder: Ladder, tier_id: str, deadlines: dict[str, datetime], calendars: CalendarRegistry
) -> tuple[datetime | None, datetime | None]:
    """The cap on tier ``tier_id``'s due time and the deadline that sets it.

    Every deadline that caps the tier (``RegulatoryDeadline.caps``) and is known in
    ``deadlines`` gives ``regulatory_cap(deadline, rule)``; the earliest cap wins.

    Returns:
        ``(cap, deadline)``, both None when no known deadline caps the tier.

    Raises:
        UnknownTier: ``tier_id`` not in ``ladder``; InvalidInput: unknown calendar.
    """
    ladder.tier(tier_id)
    best: tuple[datetime | None, datetime | None] = (None, None)
    for rule in ladder.deadlines_for(tier_id):
        at = deadlines.get(rule.name)
        if at is None:
            continue
        cap = regulatory_cap(at, rule, calendars)
        if cap is not None and (best[0] is None or cap < best[0]):
            best = (cap, at)
    return best


def capping_rule(
    ladder: Ladder, tier_id: str, deadlines: dict[str, datetime], calendars: CalendarRegistry
) -> RegulatoryDeadline | None:
    """The regulatory rule whose ``deadline - buffer`` caps tier ``tier_id`` (the earliest
    such cap), or None. Same choice as :func:`tier_cap`."""
    best: tuple[datetime, RegulatoryDeadline] | None = None
    for rule in ladder.deadlines_for(tier_id):
        at = deadlines.get(rule.name)
        if at is None:
            continue
        cap = regulatory_cap(at, rule, calendars)
        if cap is not None and (best is None or cap < best[0]):
            best = (cap, rule)
    return None if best is None else best[1]


@dataclass(frozen=True, slots=True)
class DueCap:
    """How a tier's due time came out of its cap (:func:`tier_cap` and ``cap_due``), as
    :func:`cap_provenance` records it."""

    uncapped: datetime
    """The due time from the tier's SLA window alone (aware)."""
    due: datetime
    """The due time after the cap (aware); earlier than ``uncapped`` when the cap moved it."""
    at: datetime | None = None
    """The deadline :func:`tier_cap` returned (picks the rule without recomputing caps);
    None = find the capping rule again."""
    sources: Mapping[str, str] | None = None
    """Citations overriding a rule's ``source`` by rule name (a variant's); None = none."""


def cap_provenance(
    ladder: Ladder, tier_id: str, deadlines: dict[str, datetime], calendars: CalendarRegistry,
    cap: DueCap,
) -> dict[str, object] | None:
    """Ledger ``details["deadline"]`` for a due time set for tier ``tier_id``: the deadline
    that bounds it (name, citation, ISO UTC instant, buffer) and ``capped`` = True when the
    cap moved the due time earlier than the tier window alone (``cap.uncapped``). None when
    no deadline bounds the tier."""
    rule = None
    if cap.at is not None:
        rule = next((r for r in ladder.deadlines_for(tier_id)
                     if deadlines.get(r.name) == cap.at), None)
    if rule is None:
        rule = capping_rule(ladder, tier_id, deadlines, calendars)
    if rule is None:
        return None
    return {
        "name": rule.name,
        "citation": (cap.sources or {}).get(rule.name) or rule.source,
        "at": deadlines[rule.name].isoformat(),
        "buffer": f"{rule.buffer} {rule.window.unit.value}",
        "capped": cap.due < cap.uncapped,
    }


def escalation_tier_cap(
    ladder: Ladder,
    tier_id: str,
    deadlines: tuple[tuple[str, datetime], ...],
    current: datetime | None,
    calendars: CalendarRegistry,
) -> tuple[datetime | None, datetime | None]:
    """:func:`tier_cap` for an escalation carrying ``deadlines`` and its ``current`` deadline.

    A ladder without regulatory rules caps at ``current`` itself (no buffer); an escalation
    without recorded ``deadlines`` uses ``current`` for the ladder's first rule.
    """
    if not ladder.deadlines:
        return current, current
    return tier_cap(ladder, tier_id, deadline_values(ladder, deadlines, current), calendars)


def cap_due(due: datetime, cap: datetime | None, now: datetime) -> datetime:
    """``due`` capped at ``cap`` but never before ``now`` (a cap already passed fires now)."""
    if cap is None or due <= cap:
        return due
    return max(now, cap)


# ---------------------------------------------------------------- open time (pause/resume)
def uses_open_time(window: SlaWindow) -> bool:
    """True when the window counts business time (its remainder is kept in open time)."""
    return window.unit in BUSINESS_UNITS


def open_ms_between(cal: Calendar, start: datetime, end: datetime) -> int:
    """Milliseconds of working time between ``start`` and ``end`` (0 if end <= start),
    rounded up.

    For a non-business calendar (always open) this is the elapsed time.
    """
    start, end = require_aware(start, "start"), require_aware(end, "end")
    if end <= start:
        return 0
    if not isinstance(cal, BusinessCalendar):
        return -(-(end - start) // _MS)
    total = timedelta(0)
    day = start.astimezone(cal.tz).date()
    last = end.astimezone(cal.tz).date()
    while day <= last:
        if cal.is_business_day(day):
            begin, close = max(start, cal.opens_at(day)), min(end, cal.closes_at(day))
            if begin < close:
                total += close - begin
        day += timedelta(days=1)
    return -(-total // _MS)  # rounded up: a pause never loses a fraction of a millisecond


def advance_open_ms(cal: Calendar, start: datetime, amount_ms: int) -> datetime:
    """The instant ``amount_ms`` of working time after ``start`` (elapsed for always-open).

    Raises:
        InvalidInput: negative amount or naive start.
    """
    start = require_aware(start, "start")
    if amount_ms < 0:
        raise InvalidInput(f"amount_ms must be >= 0, got {amount_ms}")
    if not isinstance(cal, BusinessCalendar):
        return start + amount_ms * _MS
    return cal.add_open_time(start, amount_ms * _MS)


def remaining_ms(window: SlaWindow, cal: Calendar, now: datetime, due: datetime) -> int:
    """What is left of a tier's window at ``now`` (pause): open ms for business units,
    elapsed ms otherwise; 0 when already due. Rounded **up** to the millisecond, so a pause
    never moves the due time earlier (property test)."""
    if uses_open_time(window):
        return open_ms_between(cal, now, due)
    return max(0, -((require_aware(now, "now") - require_aware(due, "due")) // _MS))


def resume_due(window: SlaWindow, cal: Calendar, now: datetime, remaining: int) -> datetime:
    """Due time after a resume at ``now`` with ``remaining`` ms left (see :func:`remaining_ms`)."""
    if uses_open_time(window):
        return advance_open_ms(cal, now, remaining)
    return require_aware(now, "now") + remaining * _MS


# ---------------------------------------------------------------- warnings
def warning_times(
    window: SlaWindow, cal: Calendar, entered: datetime, due: datetime,
    fractions: tuple[Decimal, ...],
) -> list[tuple[Decimal, datetime]]:
    """``(fraction, instant)`` of each pre-breach warning of a tier entered at ``entered`` and
    due at ``due``: ``entered + f * (due - entered)`` in open time for business units, else in
    elapsed time. Fractions outside (0, 1) are refused.

    Raises:
        InvalidInput: a fraction not strictly between 0 and 1.
    """
    out: list[tuple[Decimal, datetime]] = []
    business = uses_open_time(window)
    total = open_ms_between(cal, entered, due) if business else max(
        0, (due - entered) // _MS)
    for f in fractions:
        if not Decimal(0) < f < Decimal(1):
            raise InvalidInput(f"warning fraction must be in (0, 1), got {f}")
        offset = int(Decimal(total) * f)
        at = advance_open_ms(cal, entered, offset) if business else entered + offset * _MS
        out.append((f, at))
    return out


def active_ms_between(window: SlaWindow, cal: Calendar, start: datetime, end: datetime) -> int:
    """Active SLA time between ``start`` and ``end`` on the window's basis: open ms for
    business units, elapsed ms otherwise (rounded up; 0 if ``end <= start``)."""
    if uses_open_time(window):
        return open_ms_between(cal, start, end)
    return max(0, -((require_aware(start, "start") - require_aware(end, "end")) // _MS))


@dataclass(frozen=True, slots=True)
class ActiveTime:
    """A tier's SLA window in **active** (unpaused) milliseconds: open ms for business units,
    elapsed ms otherwise."""

    total_ms: int
    """The whole window."""
    consumed_ms: int
    """What ran before the clock (re)started."""


def active_warning_times(
    window: SlaWindow, cal: Calendar, resumed_at: datetime, active: ActiveTime,
    fractions: tuple[Decimal, ...],
) -> list[tuple[Decimal, datetime]]:
    """Warnings as fractions of **active** (unpaused) SLA time after a resume.

    The tier's window is ``active.total_ms`` of active time (open ms for business units,
    elapsed otherwise), ``active.consumed_ms`` of which ran before the clock (re)started at
    ``resumed_at``. The warning at fraction ``f`` is due once ``f * total_ms`` of active
    time has run:
    ``resumed_at`` + the rest, counted like the due time (``resume_due``). Fractions already
    reached before the pause are left out (they were scheduled in the earlier run).

    Raises:
        InvalidInput: a fraction not strictly between 0 and 1.
    """
    total_ms, consumed_ms = active.total_ms, active.consumed_ms
    out: list[tuple[Decimal, datetime]] = []
    for f in fractions:
        if not Decimal(0) < f < Decimal(1):
            raise InvalidInput(f"warning fraction must be in (0, 1), got {f}")
        target = int(Decimal(total_ms) * f)
        if target <= consumed_ms:
            continue
        out.append((f, resume_due(window, cal, resumed_at, target - consumed_ms)))
    return out


@lru_cache(maxsize=256)  # a handful of distinct fractions (the ladders' warn_at)
def fraction_label(f: Decimal) -> str:
    """Canonical text of a warning fraction: ``Decimal("0.5")`` -> ``"0.50"``."""
    return f"{f.quantize(Decimal('0.01'))}"


# ---------------------------------------------------------------- priority
def band_weight(ladder: Ladder, materiality: Decimal) -> int:
    """Priority weight of an amount: 0 below every band, else 1 + the band's index in
    ascending ``min_amount`` order (the highest band has weight ``len(ladder.bands)``)."""
    band = ladder.band_for(materiality)
    if band is None:
        return 0
    ordered = sorted(ladder.bands, key=lambda b: b.min_amount)
    return ordered.index(band) + 1

