"""One rule for local wall times, used by every path that reads one (pure).

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
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from escalation.domain.errors import InvalidInput
from escalation.domain.timeutil import iso_text

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
