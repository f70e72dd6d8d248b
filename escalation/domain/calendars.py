"""SLA windows and the calendars they are counted in.

A window is an amount plus an explicit unit (docs/ladders.md): ``calendar_minutes``,
``calendar_hours``, ``calendar_days``, ``business_hours`` or ``business_days``, counted in a
named calendar. A calendar turns "start + window" into an aware UTC deadline.

This module holds the protocol and the always-open ``utc`` calendar; business calendars
(working hours, holidays, the US Federal Reserve calendar) live in
``escalation.domain.business_calendar``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from escalation.domain.errors import InvalidInput
from escalation.domain.timeutil import require_aware


class WindowUnit(StrEnum):
    """Units an SLA window can be expressed in."""

    CALENDAR_MINUTES = "calendar_minutes"
    CALENDAR_HOURS = "calendar_hours"
    CALENDAR_DAYS = "calendar_days"
    BUSINESS_HOURS = "business_hours"
    BUSINESS_DAYS = "business_days"


#: The longest window each unit allows: about 100 years. A longer one is a typo (no dispute
#: rule runs for a century) and would overflow date arithmetic (datetime ends at year 9999),
#: crashing every worker that claims an escalation on it.
MAX_WINDOW: dict[WindowUnit, int] = {
    WindowUnit.CALENDAR_MINUTES: 100 * 366 * 24 * 60,
    WindowUnit.CALENDAR_HOURS: 100 * 366 * 24,
    WindowUnit.CALENDAR_DAYS: 100 * 366,
    WindowUnit.BUSINESS_HOURS: 100 * 261 * 24,
    WindowUnit.BUSINESS_DAYS: 100 * 261,
}


@dataclass(frozen=True, slots=True)
class SlaWindow:
    """An SLA window: ``amount`` (> 0, at most :data:`MAX_WINDOW` of its unit, about 100
    years) of ``unit`` counted in calendar ``calendar``.

    Raises:
        InvalidInput: a non-integer, non-positive or longer amount.
    """

    amount: int
    unit: WindowUnit
    calendar: str = "utc"

    def __post_init__(self) -> None:
        if isinstance(self.amount, bool) or not isinstance(self.amount, int) or self.amount <= 0:
            raise InvalidInput(f"SLA window amount must be a positive integer, got {self.amount!r}")
        limit = MAX_WINDOW.get(self.unit, MAX_WINDOW[WindowUnit.CALENDAR_DAYS])
        if self.amount > limit:
            raise InvalidInput(f"SLA window amount {self.amount} {self.unit} "
                               f"is longer than about 100 years (at most {limit})")

    def describe(self) -> str:
        """Human text such as ``"24 calendar_hours (utc)"``."""
        return f"{self.amount} {self.unit.value} ({self.calendar})"


class Calendar(Protocol):
    """Deadline arithmetic for one calendar.

    ``id`` names it in ladder files; ``version`` is recorded in ledger rows so a decision can
    be recomputed with the same holidays later.
    """

    @property
    def id(self) -> str: ...

    @property
    def version(self) -> str: ...

    def add(self, start: datetime, amount: int, unit: WindowUnit) -> datetime:
        """Return the aware UTC instant ``amount`` ``unit`` after aware ``start``."""
        ...


@dataclass(frozen=True, slots=True)
class AlwaysOpenCalendar:
    """A 24x7 calendar in UTC: business units count like calendar units.

    ``version`` (recorded as a ledger row's ``calendar_version``) names the calendar, the
    zone and the rule version, in the form every other calendar uses
    (``<calendar>@<zone>:<version>``), so a row says which calendar counted its due time.
    """

    id: str = "utc"
    version: str = "utc@UTC:1"

    def add(self, start: datetime, amount: int, unit: WindowUnit) -> datetime:
        """Add the window in elapsed time (UTC has no DST). Raises InvalidInput if naive."""
        start = require_aware(start, "start")
        if unit in (WindowUnit.CALENDAR_MINUTES,):
            return start + timedelta(minutes=amount)
        if unit in (WindowUnit.CALENDAR_HOURS, WindowUnit.BUSINESS_HOURS):
            return start + timedelta(hours=amount)
        return start + timedelta(days=amount)


UTC_CALENDAR = AlwaysOpenCalendar()

CalendarRegistry = Mapping[str, Calendar]


def window_end(start: datetime, window: SlaWindow, calendars: CalendarRegistry) -> datetime:
    """The instant ``window`` after ``start`` in the window's calendar.

    Raises:
        InvalidInput: ``start`` is naive, or the window names a calendar not in ``calendars``.
    """
    try:
        calendar = calendars[window.calendar]
    except KeyError:
        raise InvalidInput(
            f"unknown calendar {window.calendar!r}; known: {', '.join(sorted(calendars))}"
        ) from None
    return calendar.add(require_aware(start, "start"), window.amount, window.unit)
