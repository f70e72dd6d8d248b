"""Regulatory deadlines for one dispute: day-end conventions, billing cycles, variants (pure).

Day-end conventions (docs/sla.md "Day-end conventions"), applied to regulatory deadlines:

* ``calendar_days``: the deadline is the **end of the local day** N days after the anchor's
  local date, in the deadline calendar's zone (a notice on 2023-08-25 with 15 days is due
  by the end of 2023-09-09 local time: the instant 2023-09-10T00:00 local). Weekends and
  holidays count.
* ``business_days``: the close of business of the Nth business day after the anchor's local
  day (the receipt day is never counted; ``BusinessCalendar.add``).
* ``calendar_hours`` / ``calendar_minutes`` / ``business_hours``: the calendar's ``add``.
* **billing cycles** (Reg Z, 12 CFR 1026.13(c)(2), "within two complete billing cycles ...
  but in no event later than 90 days after receiving a billing-error notice"): the cycles
  close on the account's closing day each month (a closing day past a month's last day
  closes on that last day: day 31 closes on 28 or 29 February, 30 April, ...). A cycle is
  complete after receipt when it begins on or after the receipt date; the deadline is the
  end of the local day on which the Nth such cycle closes, and never later than the rule's
  ``window`` (90 calendar days). Counting a cycle that begins on the receipt day is the
  earlier of the two readings, so the deadline is never later than either reading allows.
* **variants** (Reg E, 12 CFR 1005.11(c)(3)): the first variant one of whose boolean
  attributes is true replaces the window (and the citation).

A deadline is met by anything strictly before its instant.
"""

from __future__ import annotations

import calendar as pycal
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from escalation.domain.calendars import (
    BusinessCalendar,
    CalendarRegistry,
    SlaWindow,
    WindowUnit,
    end_of_local_day,
    local_date,
    window_end,
)
from escalation.domain.errors import InvalidInput
from escalation.domain.ladder import (
    BILLING_CYCLE_ATTRIBUTE,
    RegulatoryDeadline,
    ResolvedDeadline,
)
from escalation.domain.timeutil import require_aware

_TRUE = {"true", "yes", "y", "1"}
_FALSE = {"false", "no", "n", "0"}
UTC_ZONE = ZoneInfo("UTC")


def bool_attribute(attributes: Mapping[str, object], name: str) -> bool:
    """Boolean dispute attribute ``name`` (a bool, or text true/false/yes/no/1/0).

    Raises:
        InvalidInput: missing or not a boolean.
    """
    if name not in attributes or attributes[name] is None or attributes[name] == "":
        raise InvalidInput(f"missing dispute attribute {name!r} (true or false)")
    value = attributes[name]
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidInput(f"dispute attribute {name!r} must be true or false, got {value!r}")


def closing_day_attribute(attributes: Mapping[str, object]) -> int:
    """The billing-cycle closing day of month (1-31) from ``attributes``.

    Raises:
        InvalidInput: missing, not an integer, or outside 1-31.
    """
    name = BILLING_CYCLE_ATTRIBUTE
    value = attributes.get(name)
    if value is None or value == "":
        raise InvalidInput(f"missing dispute attribute {name!r} (billing-cycle closing day "
                           "of month, 1-31)")
    if isinstance(value, bool):
        raise InvalidInput(f"dispute attribute {name!r} must be a day of month 1-31")
    try:
        day = int(str(value).strip())
    except ValueError:
        raise InvalidInput(f"dispute attribute {name!r} must be a day of month 1-31, "
                           f"got {value!r}") from None
    if not 1 <= day <= 31:
        raise InvalidInput(f"dispute attribute {name!r} must be a day of month 1-31, got {day}")
    return day


def check_attributes(
    needs: tuple[str, ...], attributes: Mapping[str, object]
) -> dict[str, object]:
    """Validate the attributes a ladder needs; returns them normalised (bool / int).

    Raises:
        InvalidInput: one line naming every attribute the ladder does not use (a typo, or
            one meant for another ladder: it would be dropped, and a deadline silently
            computed without it), else every missing one, else the first malformed one.
    """
    unknown = sorted(set(attributes) - set(needs))
    if unknown:
        uses = ", ".join(needs) if needs else "none"
        raise InvalidInput(f"unknown dispute attribute(s) {', '.join(map(repr, unknown))}: "
                           f"this ladder's deadlines use {uses}")
    missing = [n for n in needs if attributes.get(n) is None or attributes.get(n) == ""]
    if len(missing) > 1:
        raise InvalidInput("missing dispute attributes " + ", ".join(map(repr, missing)))
    out: dict[str, object] = {}
    for name in needs:
        if name == BILLING_CYCLE_ATTRIBUTE:
            out[name] = closing_day_attribute(attributes)
        else:
            out[name] = bool_attribute(attributes, name)
    return out


def cycle_close(year: int, month: int, closing_day: int) -> date:
    """The date a cycle with ``closing_day`` closes in ``year``-``month`` (month-end clamp)."""
    return date(year, month, min(closing_day, pycal.monthrange(year, month)[1]))


def billing_cycle_end(received: date, closing_day: int, cycles: int) -> date:
    """Local date on which the ``cycles``-th complete billing cycle after ``received`` closes.

    A cycle runs from the day after one close to the next close; it is complete after
    receipt when it begins on or after ``received`` (module doc).
    Example: received 2026-01-05, closing day 6, 2 cycles -> 2026-03-06.
    """
    if cycles <= 0:
        raise InvalidInput(f"billing cycles must be > 0, got {cycles}")
    # the close that starts the first complete cycle: the first close on or after received-1
    start = received - timedelta(days=1)
    year, month = start.year, start.month
    close = cycle_close(year, month, closing_day)
    if close < start:
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    for _ in range(cycles):
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return cycle_close(year, month, closing_day)


def zone_of(window: SlaWindow, calendars: CalendarRegistry) -> ZoneInfo:
    """The zone whose local days a window's calendar counts (UTC for the always-open one).

    Raises:
        InvalidInput: unknown calendar.
    """
    try:
        cal = calendars[window.calendar]
    except KeyError:
        raise InvalidInput(
            f"unknown calendar {window.calendar!r}; known: {', '.join(sorted(calendars))}"
        ) from None
    return cal.tz if isinstance(cal, BusinessCalendar) else UTC_ZONE


def window_deadline(
    anchor_at: datetime, window: SlaWindow, calendars: CalendarRegistry
) -> datetime:
    """A regulatory window's deadline from ``anchor_at`` by the day-end conventions.

    Raises:
        InvalidInput: naive anchor or unknown calendar.
    """
    anchor_at = require_aware(anchor_at, "anchor_at")
    if window.unit is WindowUnit.CALENDAR_DAYS:
        tz = zone_of(window, calendars)
        return end_of_local_day(local_date(anchor_at, tz) + timedelta(days=window.amount), tz)
    return window_end(anchor_at, window, calendars)


def resolve_deadline(
    rule: RegulatoryDeadline, anchor_at: datetime, calendars: CalendarRegistry,
    attributes: Mapping[str, object],
) -> ResolvedDeadline:
    """``rule`` computed for one dispute anchored at ``anchor_at`` with ``attributes``.

    Raises:
        InvalidInput: naive anchor, unknown calendar, missing/malformed attribute.
    """
    window, source = rule.window, rule.source
    for variant in rule.variants:
        if any(bool_attribute(attributes, a) for a in variant.when_any):
            window, source = variant.window, variant.source or rule.source
            break
    else:
        for variant in rule.variants:  # every variant's attributes are needed, even if false
            for a in variant.when_any:
                bool_attribute(attributes, a)
    at = window_deadline(anchor_at, window, calendars)
    text = f"{window.amount} {window.unit.value} ({window.calendar})"
    if rule.billing_cycles:
        closing = closing_day_attribute(attributes)
        tz = zone_of(window, calendars)
        end_day = billing_cycle_end(local_date(anchor_at, tz), closing, rule.billing_cycles)
        by_cycles = end_of_local_day(end_day, tz)
        if by_cycles <= at:
            at = by_cycles
            text = (f"{rule.billing_cycles} complete billing cycles (closing day {closing}), "
                    f"ending {end_day.isoformat()}; capped at {text}")
        else:
            text = (f"{text}, earlier than {rule.billing_cycles} complete billing cycles "
                    f"(closing day {closing}) ending {end_day.isoformat()}")
    return ResolvedDeadline(rule.name, at.astimezone(UTC), source, text)
