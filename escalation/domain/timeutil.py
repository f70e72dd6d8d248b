"""Time helpers shared by the domain: aware-UTC checks and epoch-millisecond conversion.

Scores in Redis are epoch **milliseconds** (docs/architecture.md); the domain works in aware
``datetime`` objects and converts only at the edges.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

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
        raise InvalidInput(f"{name} must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(f"{name} must be timezone-aware (got naive {value.isoformat()})")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59-05:00 or 0001-01-01T00:00+05:00: no UTC year
        raise InvalidInput(f"{name} {value.isoformat()} is outside the instants UTC can "
                           "hold") from None


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
