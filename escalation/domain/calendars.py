"""SLA windows, the calendars they are counted in, and local wall times (pure).

A window is an amount plus an explicit unit (docs/ladders.md): ``calendar_minutes``,
``calendar_hours``, ``calendar_days``, ``business_hours`` or ``business_days``, counted in a
named calendar. A calendar turns "start + window" into an aware UTC deadline. In reading
order: local wall times (one rule for every path that reads one), the window and the calendar
protocol with the always-open ``utc`` calendar, then business calendars (working hours,
holidays, the US Federal Reserve calendar).

Local wall times
----------------

Enqueue, import, pause/resume and the calendars all turn local wall times into instants
through these functions, so a given input has one answer everywhere (docs/sla.md "Wall
times"):

* An input with an offset (``2026-03-05T23:30:00-08:00``, ``...Z``) is that instant.
* A **naive** wall time (``2026-03-05T23:30``) is read in the institution's zone. A wall time
  that does not exist (the spring-forward gap) or exists twice (the fall-back overlap)
  resolves to the **earlier** instant: a gap time is read with the post-transition offset
  (it lands just before the gap), an ambiguous one takes its first occurrence. The instant is
  therefore never later than the wall clock reading, so a deadline computed from it is never
  late. Example: ``2026-03-08T02:30`` in America/New_York is ``06:30Z`` (not ``07:30Z``).
* A **date-only** input (``2023-08-25``) means that local date in the institution's zone; as
  an instant it is the start of that local day (00:00 local, resolved by the rule above).
  A calendar-day deadline counted from it ends at the end of the local day (docs/sla.md
  "Day-end conventions").

Business calendars
------------------

An IANA time zone, working days, working hours and holidays.

Conventions (docs/ladders.md "Calendars and day-count conventions"):

* ``calendar_minutes`` / ``calendar_hours``: elapsed time (``start + timedelta``); a DST change
  does not stretch or shrink them.
* ``calendar_days``: added in *local wall-clock* time of the calendar's zone, so one calendar
  day across the spring-forward gap is 23 elapsed hours in America/New_York and 25 across the
  fall-back overlap. Holidays and weekends count (they are calendar days).
* Missing and doubled wall times (DST gap / overlap) resolve to the **earlier** instant: a
  wall time inside the gap is read with the post-transition offset (it lands just before the
  gap), an ambiguous one takes its first occurrence. A deadline is therefore never later than
  its wall-clock reading, and chained windows never end later than one window of their sum.
  (java.time shifts gap times forward instead; that can push a chained deadline past a
  regulatory one, which ``ladder check`` caught.)
* ``business_days``: the deadline is the **close of the Nth business day after the start's
  local day** (the start day itself is never counted: "exclusive start"; whether Reg E's "within 10
  business days of receiving" excludes the day of receipt is not settled by the rule's text,
  so this is a stated choice). Time of
  day of the start does not matter: a notice at 08:00 or at 20:00 on Monday, with N = 1, is
  due at Tuesday's close.
* ``business_hours``: N hours of elapsed time counted only inside working hours of business
  days; a start outside working hours begins counting at the next open. A window that runs
  out exactly at a close ends at that close.

Working days are ISO weekdays (1 = Monday ... 7 = Sunday). ``close == time(0)`` means
midnight at the end of the day (24:00), so ``open=00:00, close=00:00`` is a 24-hour day.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import holidays as holidays_lib
from holidays.version import __version__ as HOLIDAYS_VERSION

from escalation.domain.errors import InvalidInput
from escalation.domain.timeutil import iso_text, require_aware

_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name`` (e.g. ``"America/Los_Angeles"``).

    Raises:
        InvalidInput: unknown or malformed zone name.
    """
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise InvalidInput(f"unknown time zone {name!r} (an IANA name such as "
                           "America/New_York)") from None


# Pure, and called with the same few wall times over and over (a day's close, midnight): the
# ladder check resolves ~10^5 of them, mostly repeats.
@functools.lru_cache(maxsize=256)
def resolve_wall(wall: datetime, tz: ZoneInfo) -> datetime:
    """Aware UTC instant of the naive local wall time ``wall`` in ``tz``.

    A nonexistent (gap) or ambiguous (overlap) wall time takes the **earlier** instant.

    Raises:
        InvalidInput: ``wall`` is not naive.
    """
    if wall.tzinfo is not None:
        raise InvalidInput(f"resolve_wall needs a naive wall time, got {wall.isoformat()}")
    first = wall.replace(tzinfo=tz, fold=0)
    if first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != wall:
        # In the gap: fold=1 uses the post-transition offset, which lands before the gap.
        return wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    return first.astimezone(UTC)


def start_of_local_day(day: date, tz: ZoneInfo) -> datetime:
    """Aware UTC instant at which local ``day`` begins in ``tz``."""
    return resolve_wall(datetime.combine(day, time(0)), tz)


def end_of_local_day(day: date, tz: ZoneInfo) -> datetime:
    """Aware UTC instant at which local ``day`` ends in ``tz`` (= the next day's 00:00).

    A deadline "at the end of day D" is this instant: anything strictly before it is in time.
    """
    return start_of_local_day(day + timedelta(days=1), tz)


def local_date(instant: datetime, tz: ZoneInfo) -> date:
    """The local date of aware ``instant`` in ``tz``. Raises InvalidInput if naive."""
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise InvalidInput(f"instant must be timezone-aware, got {instant.isoformat()}")
    return instant.astimezone(tz).date()


def parse_wall_time(text: str, tz: ZoneInfo, name: str) -> tuple[datetime, bool]:
    """Parse an ISO-8601 input by the module's rule.

    Returns:
        ``(aware UTC instant, date_only)``; ``date_only`` is True for ``YYYY-MM-DD`` input
        (the instant is then the start of that local day in ``tz``).

    Raises:
        InvalidInput: empty or not ISO-8601 (the message names ``name``), or refused by
            :func:`~escalation.domain.timeutil.iso_text` (a week date, a fraction past
            microseconds; lower-case ``t``/``z`` are read).
    """
    value = text.strip()
    if not value:
        raise InvalidInput(f"{name}: empty")
    value = iso_text(value, name)
    try:
        if _DATE_ONLY.match(value):
            return start_of_local_day(date.fromisoformat(value), tz), True
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"{name}: not an ISO-8601 date or time: {value!r}") from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        return resolve_wall(parsed, tz), False
    return parsed.astimezone(UTC), False


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


HolidayPredicate = Callable[[date], bool]
MAX_SCAN_DAYS = 3660  # ten years: a calendar with no business day in that span is a config error
WEEKDAYS = {"mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6, "sun": 7}


def fixed_holidays(dates: Iterable[date]) -> HolidayPredicate:
    """A holiday predicate for an explicit list of local dates."""
    table = frozenset(dates)
    return table.__contains__


@dataclass(frozen=True, slots=True)
class BusinessCalendar:
    """A calendar with working days, working hours and holidays in one IANA time zone.

    Attributes:
        id: name used in ladder files (``window.calendar``).
        version: recorded in ledger rows so a due time can be recomputed later.
        tz: the zone whose local days and hours count.
        working_days: ISO weekdays that are working days (1 = Monday ... 7 = Sunday).
        open: local opening time of a working day.
        close: local closing time (``time(0)`` = 24:00, the end of the day).
        is_holiday: local date -> True when closed all day (on top of non-working weekdays).

    Raises:
        InvalidInput: empty or out-of-range working days, or ``open >= close`` (except 24:00).
    """

    id: str
    version: str
    tz: ZoneInfo
    working_days: frozenset[int]
    open: time
    close: time
    is_holiday: HolidayPredicate = field(default=lambda _d: False)
    base_id: str = ""
    """For a calendar derived by :func:`institution_calendar`: the id it was derived from."""

    def __post_init__(self) -> None:
        if not self.working_days or not self.working_days <= frozenset(range(1, 8)):
            raise InvalidInput(
                f"calendar {self.id}: working_days must be a non-empty subset of 1..7 "
                f"(ISO weekdays), got {sorted(self.working_days)}"
            )
        if self.close != time(0) and self.open >= self.close:
            raise InvalidInput(
                f"calendar {self.id}: open {self.open} must be before close {self.close}"
            )

    # -- days ---------------------------------------------------------------------------
    def is_business_day(self, day: date) -> bool:
        """True when local ``day`` is a working weekday and not a holiday."""
        return day.isoweekday() in self.working_days and not self.is_holiday(day)

    def local(self, day: date, at: time) -> datetime:
        """Aware UTC instant of wall time ``at`` on local ``day`` (see :meth:`resolve_wall`)."""
        return self.resolve_wall(datetime.combine(day, at))

    def resolve_wall(self, wall: datetime) -> datetime:
        """Aware UTC instant of naive local ``wall``; a missing or doubled wall time takes the
        earlier instant (a deadline never lands later than its wall-clock reading)."""
        return resolve_wall(wall, self.tz)  # the one rule (escalation.domain.calendars)

    def opens_at(self, day: date) -> datetime:
        """Aware UTC instant the calendar opens on local ``day``."""
        return self.local(day, self.open)

    def closes_at(self, day: date) -> datetime:
        """Aware UTC instant the calendar closes on local ``day`` (24:00 = next midnight)."""
        if self.close == time(0):
            return self.resolve_wall(datetime.combine(day + timedelta(days=1), time(0)))
        return self.local(day, self.close)

    def next_business_day(self, day: date) -> date:
        """The first business day strictly after ``day``. Raises InvalidInput if none in 10y."""
        for offset in range(1, MAX_SCAN_DAYS + 1):
            candidate = day + timedelta(days=offset)
            if self.is_business_day(candidate):
                return candidate
        raise InvalidInput(f"calendar {self.id}: no business day within {MAX_SCAN_DAYS} days")

    # -- arithmetic ---------------------------------------------------------------------
    def add(self, start: datetime, amount: int, unit: WindowUnit) -> datetime:
        """The aware UTC instant ``amount`` ``unit`` after aware ``start`` (module conventions).

        Raises:
            InvalidInput: ``start`` naive, or ``amount`` negative.
        """
        start = require_aware(start, "start")
        if amount < 0:
            raise InvalidInput(f"window amount must not be negative, got {amount}")
        if unit is WindowUnit.CALENDAR_MINUTES:
            return start + timedelta(minutes=amount)
        if unit is WindowUnit.CALENDAR_HOURS:
            return start + timedelta(hours=amount)
        if unit is WindowUnit.CALENDAR_DAYS:
            wall = start.astimezone(self.tz).replace(tzinfo=None) + timedelta(days=amount)
            return self.resolve_wall(wall)
        if unit is WindowUnit.BUSINESS_DAYS:
            return self._add_business_days(start, amount)
        return self.add_open_time(start, timedelta(hours=amount))

    def _add_business_days(self, start: datetime, amount: int) -> datetime:
        day = start.astimezone(self.tz).date()
        if amount == 0:
            return start
        for _ in range(amount):
            day = self.next_business_day(day)
        return self.closes_at(day)

    def add_open_time(self, start: datetime, amount: timedelta) -> datetime:
        """The instant ``amount`` (>= 0) of working time after aware ``start``: the one walk
        over working hours (a ``business_hours`` window, and the remainder of a paused
        window on resume, ``sla_timing.advance_open_ms``).

        Raises:
            InvalidInput: the working time does not fit in :data:`MAX_SCAN_DAYS` days.
        """
        remaining = amount
        if not remaining:
            return start
        day = start.astimezone(self.tz).date()
        for _ in range(MAX_SCAN_DAYS):
            if self.is_business_day(day):
                begin, end = max(start, self.opens_at(day)), self.closes_at(day)
                if begin < end:
                    if begin + remaining <= end:
                        return begin + remaining
                    remaining -= end - begin
            day = self.next_business_day(day)
        raise InvalidInput(f"calendar {self.id}: business hours do not fit in {MAX_SCAN_DAYS} days")


# -- the US Federal Reserve calendar ---------------------------------------------------------

FED_RULE_VERSION = "2"
"""2: the ``holidays`` package's ``XFED`` financial calendar. Rule 1 was built here from the
federal holidays plus the Federal Reserve's Saturday/Sunday rule; both give the same closed
days on every date 1999-2060 (tests/unit/test_calendars.py holds rule 1 as the reference)."""


@functools.lru_cache(maxsize=256)
def _fed_closed_days(year: int) -> frozenset[date]:
    """Local dates on which Reserve Banks are closed for a holiday, for ``year``.

    Source: ``holidays.financial_holidays("XFED")``, the Federal Reserve Banks' published
    holiday schedule (e.g. the St. Louis and Richmond Fed): the 11 federal holidays
    (Juneteenth since 2021, a Saturday that year: first closed Monday 2022-06-20); a holiday
    on a Sunday closes the Monday after; a holiday on a Saturday leaves Reserve Banks open the
    Friday before (the Saturday itself stays listed; it is not a working day anyway). Cached
    per year: membership is a frozenset lookup.
    """
    return frozenset(holidays_lib.financial_holidays("XFED", years=year))


def is_fed_holiday(day: date) -> bool:
    """True when the Federal Reserve Banks are closed for a holiday on ``day``."""
    return day in _fed_closed_days(day.year)


US_FEDERAL_RESERVE = BusinessCalendar(
    id="us_federal_reserve",
    version=f"fed-{FED_RULE_VERSION}+holidays-{HOLIDAYS_VERSION}",
    tz=ZoneInfo("America/New_York"),
    working_days=frozenset({1, 2, 3, 4, 5}),
    open=time(9, 0),
    close=time(17, 0),
    is_holiday=is_fed_holiday,
)
"""Reserve Banks' schedule: Mon-Fri 09:00-17:00 America/New_York (hours and zone are this
service's assumption, not a published rule), closed on Federal Reserve holidays."""


def builtin_calendars() -> dict[str, Calendar]:
    """The calendars every deployment has: ``utc`` (always open), ``us_federal_reserve``, and
    ``institution`` (the deployment's institution calendar; by default the Federal Reserve
    calendar in America/New_York, see :func:`with_institution`)."""
    cals: dict[str, Calendar] = {UTC_CALENDAR.id: UTC_CALENDAR,
                                 US_FEDERAL_RESERVE.id: US_FEDERAL_RESERVE}
    return with_institution(cals, US_FEDERAL_RESERVE.id, "America/New_York")


# -- the institution calendar ------------------------------------------------------------------

INSTITUTION = "institution"
"""Calendar id a ladder window uses for "the institution's business calendar in its own time
zone": resolved per escalation (the escalation's zone and calendar, stored on it), else per
ladder version (``[institution]`` in the file), else the deployment settings
(``ESCALATION_INSTITUTION_TIMEZONE`` / ``ESCALATION_INSTITUTION_CALENDAR``)."""

ALWAYS_OPEN_DAYS = frozenset(range(1, 8))


def institution_calendar(base: Calendar, tz_name: str) -> BusinessCalendar:
    """``base``'s working days, hours and holidays read in zone ``tz_name``, as id
    ``institution``. Its ``version`` names the base calendar, the zone and the base version
    (``"us_federal_reserve@America/Los_Angeles:fed-2+holidays-0.109"``), so the
    ``calendar_version`` recorded on a ledger row says which calendar and zone counted.

    The always-open ``utc`` calendar becomes a 24x7 calendar in ``tz_name`` (its local days
    matter for day-end conventions).

    Raises:
        InvalidInput: unknown zone.
    """
    tz = zone(tz_name)
    version = f"{base.id}@{tz.key}:{base.version}"
    if isinstance(base, BusinessCalendar):
        return replace(base, id=INSTITUTION, version=version, tz=tz, base_id=base.id)
    return BusinessCalendar(id=INSTITUTION, version=version, tz=tz,
                            working_days=ALWAYS_OPEN_DAYS, open=time(0), close=time(0),
                            base_id=base.id)


_SCOPED: dict[tuple[int, str, str], tuple[Mapping[str, Calendar], dict[str, Calendar]]] = {}


def with_institution(
    calendars: Mapping[str, Calendar], calendar_id: str, tz_name: str
) -> dict[str, Calendar]:
    """A copy of ``calendars`` whose ``institution`` entry is ``calendar_id`` in ``tz_name``.

    Results are memoised per (registry object, calendar, zone): an escalation-scoped registry
    is looked up on every decision.

    Raises:
        InvalidInput: unknown calendar id (``institution`` itself is not a valid base) or zone.
    """
    key = (id(calendars), calendar_id, tz_name)
    hit = _SCOPED.get(key)
    if hit is not None and hit[0] is calendars:  # same registry object (ids can be reused)
        return hit[1]
    if calendar_id == INSTITUTION or calendar_id not in calendars:
        known = ", ".join(sorted(c for c in calendars if c != INSTITUTION))
        raise InvalidInput(f"unknown calendar {calendar_id!r}; known: {known}")
    scoped = dict(calendars)
    scoped[INSTITUTION] = institution_calendar(calendars[calendar_id], tz_name)
    if len(_SCOPED) > 1024:
        _SCOPED.clear()
    _SCOPED[key] = (calendars, scoped)
    return scoped


def institution_defaults(calendars: Mapping[str, Calendar]) -> tuple[str, str]:
    """``(calendar id, zone)`` of the registry's ``institution`` calendar (the deployment's
    default), or ``("us_federal_reserve", "America/New_York")`` when it has none."""
    cal = calendars.get(INSTITUTION)
    if isinstance(cal, BusinessCalendar) and cal.base_id:
        return cal.base_id, cal.tz.key
    return US_FEDERAL_RESERVE.id, "America/New_York"


def scoped_calendars(
    calendars: Mapping[str, Calendar], calendar_id: str | None, tz_name: str | None
) -> Mapping[str, Calendar]:
    """The registry an escalation counts in: ``calendars`` with ``institution`` bound to the
    escalation's own calendar and zone (either None = the registry's default for it)."""
    if calendar_id is None and tz_name is None:
        return calendars
    base, tz = institution_defaults(calendars)
    return with_institution(calendars, calendar_id or base, tz_name or tz)
