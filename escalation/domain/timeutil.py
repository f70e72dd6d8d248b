"""Time helpers shared by the domain: aware-UTC checks and epoch-millisecond conversion.

Scores in Redis are epoch **milliseconds** (docs/architecture.md); the domain works in aware
``datetime`` objects and converts only at the edges.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from escalation.domain.errors import InvalidInput

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
