"""Time helpers shared by the domain and the entrypoints: aware-UTC checks, epoch-millisecond
conversion, ISO-8601 parsing of times given by a caller (CLI options, API parameters).

Scores in Redis are epoch **milliseconds** (docs/architecture.md); the domain works in aware
``datetime`` objects and converts only at the edges.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

from escalation.domain.errors import InvalidInput, InvalidParameter

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def require_aware(value: datetime, name: str) -> datetime:
    """Return ``value`` converted to UTC.

    Raises:
        InvalidInput: ``value`` is not a datetime or is naive (no tzinfo / utcoffset).
    """
    if isinstance(value, datetime) and value.tzinfo is UTC:
        return value  # already UTC (astimezone would return it unchanged): hot-path shortcut
    if not isinstance(value, datetime):
        raise InvalidInput(f"{name} must be a datetime, not {type(value).__name__}",
                           field=name)
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(f"{name} must be timezone-aware (got naive {value.isoformat()})",
                           field=name)
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59-05:00 or 0001-01-01T00:00+05:00: no UTC year
        raise InvalidInput(f"{name} {value.isoformat()} is outside the instants UTC can "
                           "hold", field=name) from None


def to_ms(value: datetime) -> int:
    """Aware datetime -> integer epoch milliseconds (UTC). Raises InvalidInput if naive."""
    if isinstance(value, datetime) and value.tzinfo is UTC:  # hot path: no re-validation
        return (value - EPOCH) // _MS
    aware = require_aware(value, "datetime")
    return (aware - EPOCH) // _MS


def from_ms(ms: int) -> datetime:
    """Integer epoch milliseconds -> aware UTC datetime."""
    return EPOCH + timedelta(milliseconds=ms)


_ISO_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+)S)?)?$")
_SHORT_DURATION = re.compile(r"^(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")


def parse_duration(text: str | None, name: str) -> timedelta | None:
    """A relative time such as ``due_in``: ISO 8601 days and time (``P2D``, ``PT36H``,
    ``P1DT2H30M``; no years, months or weeks: their length is not fixed) or the short form
    ``3d``, ``36h``, ``90m``, ``45s``, ``1h30m`` (days of 24 h: a relative time is an amount
    of elapsed time, read in no zone). None for None.

    Raises:
        InvalidParameter: naming ``name`` (its plain name, ``--due-in`` -> ``due_in``, as
            ``params[0]``: the API's ``errors[].field``), for anything else (blank, negative,
            fractions, units out of order) or a duration out of ``timedelta``'s range.
    """
    if text is None:
        return None
    param = name.lstrip("-").replace("-", "_")  # the plain name: --due-in -> due_in
    raw = text.strip()
    found = _ISO_DURATION.match(raw.upper()) if raw[:1] in "Pp" else _SHORT_DURATION.match(
        raw.lower())
    if not raw or found is None or not any(found.groupdict().values()) or raw.upper() in (
            "P", "PT") or raw.upper().endswith("T"):
        raise InvalidParameter("{" + param + "} must be a duration such as 36h, 2d, 1h30m "
                               "or ISO 8601 PT36H (days, hours, minutes, seconds), got "
                               "{got!r}", param, got=text)
    parts = {k: int(v) for k, v in found.groupdict().items() if v}
    try:
        return timedelta(days=parts.get("d", 0), hours=parts.get("h", 0),
                         minutes=parts.get("m", 0), seconds=parts.get("s", 0))
    except OverflowError:
        raise InvalidParameter("{" + param + "} is out of range, got {got!r}", param,
                               got=text) from None


_WEEK_DATE = re.compile(r"^\s*[+-]?\d{4}-?[Ww]\d")
_LONG_FRACTION = re.compile(r"[T ]\d{2}(?::?\d{2}){0,2}[.,]\d{7,}")
_LOWER_T = re.compile(r"^(\s*\d{4}-?\d{2}-?\d{2})t(?=\d)")
MAX_FRACTION_DIGITS = 6
"""Most fractional-second digits an instant may carry: ``datetime`` holds microseconds, and a
seventh digit would be dropped, changing the instant the caller wrote."""


def iso_text(value: str, name: str) -> str:
    """The one text check every caller-given time passes before ``datetime.fromisoformat``
    (the API, the CLI, the console and the import all reach it): the text ``fromisoformat``
    is to read, or an error naming ``name``.

    RFC 3339 (section 5.6, the ``format: date-time`` of docs/openapi.json) lets the ``T``
    separator and the ``Z`` offset be lower case: ``t`` and ``z`` are read as ``T`` and ``Z``.
    An ISO 8601 week date (``2026-W49-1``) is not an RFC 3339 date and is refused, as is a
    fraction of more than :data:`MAX_FRACTION_DIGITS` digits (an instant is never silently
    changed: ``fromisoformat`` would truncate it to microseconds).

    Raises:
        InvalidInput: naming ``name``, for a week date or a fraction past microseconds.
    """
    if _WEEK_DATE.match(value):
        raise InvalidInput(f"{name}: an ISO 8601 week date is not accepted ({value!r}): give "
                           "a calendar date, e.g. 2026-11-30T09:00:00Z (RFC 3339)", field=name)
    if _LONG_FRACTION.search(value.upper()):
        raise InvalidInput(f"{name}: at most {MAX_FRACTION_DIGITS} fractional-second digits "
                           f"(microseconds) are accepted, got {value!r}", field=name)
    text = _LOWER_T.sub(r"\1T", value)
    stripped = text.rstrip()
    if stripped.endswith("z"):
        text = stripped[:-1] + "Z" + text[len(stripped):]
    return text


def parse_time(value: str | None, name: str) -> datetime | None:
    """ISO-8601 text -> aware datetime (None passes through), the text checked by
    :func:`iso_text` (lower-case ``t``/``z`` read, week dates and sub-microsecond fractions
    refused).

    Raises InvalidInput, naming the option or field ``name``, for unparseable or naive
    values. A date alone (``2026-11-30``) is refused as such: ``fromisoformat`` reads it as
    naive midnight, and "must be timezone-aware (got naive 2026-11-30T00:00:00)" would blame
    a time the caller never wrote. Where a date is meaningful (``enqueue``'s times: the start
    of that local day) the caller uses :func:`parse_time_or_date` instead.
    """
    if value is None:
        return None
    value = iso_text(value, name)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"{name}: not an ISO-8601 time: {value!r}", field=name) from None
    if parsed.tzinfo is None and _is_date(value):
        raise InvalidInput(
            f"{name}: a date alone ({value!r}) is not accepted: give an instant, an ISO-8601 "
            f"time with offset, e.g. {parsed.date().isoformat()}T09:00:00-05:00", field=name)
    return require_aware(parsed, name)


def _is_date(value: str) -> bool:
    """Whether ``value`` is an ISO-8601 date without a time (``2026-11-30``, ``20261130``)."""
    try:
        date.fromisoformat(value)
    except ValueError:
        return False
    return True


def parse_time_or_date(value: str | None, name: str) -> datetime | date | None:
    """ISO-8601 text -> aware datetime, or a ``date`` for ``YYYY-MM-DD`` (a local date in the
    escalation's institution zone). Raises InvalidInput for bad or naive date-times.

    Every date form :func:`parse_time` calls "a date alone" is a date here (``20261130``
    too), so that message never reaches a command that takes dates."""
    if value is not None:
        value = iso_text(value, name)  # date.fromisoformat reads week dates too
    if value is not None and len(value.strip()) == 10:
        try:
            return date.fromisoformat(value.strip())
        except ValueError:
            raise InvalidInput(f"{name}: not an ISO-8601 date: {value!r}", field=name) from None
    if value is not None and _is_date(value):
        return date.fromisoformat(value)
    return parse_time(value, name)
