"""The webhook event body of a review-queue notification, version 1 (pure).

A review-stream entry is a flat map of strings (Redis stream fields). The webhook receives a
typed JSON object built from it by :func:`review_event`; docs/reliability.md "Webhook event"
gives its JSON Schema. A field may be added within a version; a field is never removed or
retyped without a new ``version``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from escalation.domain.errors import InvalidInput

EVENT_VERSION = 1
"""The ``version`` of the event body built here."""


class ReviewEventType(enum.StrEnum):
    """``type`` of a webhook event: the decision the notification reports."""

    PROMOTED = "escalation.promoted"
    TERMINAL = "escalation.terminal"


_KINDS = {"PROMOTED": ReviewEventType.PROMOTED, "TERMINAL": ReviewEventType.TERMINAL}


def event_type(fields: Mapping[str, str]) -> ReviewEventType:
    """The event type of a stream entry: its ``kind`` code (``PROMOTED`` / ``TERMINAL``);
    an entry written before the code was carried is terminal when it has no next tier.

    Raises:
        InvalidInput: an unknown ``kind`` code.
    """
    kind = fields.get("kind")
    if kind is None:
        return ReviewEventType.TERMINAL if not fields.get("to_tier") else ReviewEventType.PROMOTED
    try:
        return _KINDS[kind]
    except KeyError:
        raise InvalidInput(f"review entry kind: unknown code {kind!r}; known: "
                           f"{', '.join(_KINDS)}") from None


def _int(fields: Mapping[str, str], name: str) -> int:
    try:
        return int(fields[name])
    except (KeyError, ValueError):
        raise InvalidInput(f"review entry {name}: expected an integer, got "
                           f"{fields.get(name)!r}") from None


def rfc3339_utc(ms: int) -> str:
    """Epoch milliseconds as RFC 3339 UTC with milliseconds, e.g.
    ``2026-03-02T09:00:01.000Z``."""
    at = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def review_event(fields: Mapping[str, str]) -> dict[str, Any]:
    """The version-1 webhook body of one review-stream entry.

    Args:
        fields: the entry (``dispute_id``, ``seq``, ``idempotency_key``, ``kind``,
            ``match_decision``, ``from_tier``, ``to_tier``, ``ladder`` = ``name@version``,
            ``external_id``, ``source``, ``materiality`` (decimal text, cents), ``decided_ms``
            (Redis TIME at the claim, epoch ms), ``trace_id``, ``source_hash``).

    Returns:
        ``type``, ``version``, ``id`` (= the ``webhook-id`` header), ``dispute_id``,
        ``external_id`` (null when the dispute was named by UUID), ``source`` (the source
        system's name; null when not known), ``seq`` (int), ``tier``
        (the tier entered; null for a terminal decision), ``previous_tier``,
        ``match_decision``, ``ladder``, ``ladder_version`` (int or null), ``materiality``
        (decimal string, never a float: money is not rounded), ``decided_at`` (RFC 3339
        UTC), ``trace_id``, ``source_hash``.

    Raises:
        InvalidInput: a missing or non-integer ``seq`` / ``decided_ms``, an unknown ``kind``.
    """
    ladder, sep, version = fields.get("ladder", "").rpartition("@")
    if not sep:
        ladder, version = version, ""
    return {
        "type": event_type(fields).value,
        "version": EVENT_VERSION,
        "id": fields.get("idempotency_key", ""),
        "dispute_id": fields.get("dispute_id", ""),
        "external_id": fields.get("external_id") or None,
        "source": fields.get("source") or None,
        "seq": _int(fields, "seq"),
        "tier": fields.get("to_tier") or None,
        "previous_tier": fields.get("from_tier") or None,
        "match_decision": fields.get("match_decision", ""),
        "ladder": ladder,
        "ladder_version": int(version) if version.isdigit() else None,
        "materiality": fields.get("materiality", ""),
        "decided_at": rfc3339_utc(_int(fields, "decided_ms")),
        "trace_id": fields.get("trace_id", ""),
        "source_hash": fields.get("source_hash", ""),
    }
