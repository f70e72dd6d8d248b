"""Conversions between database rows and domain values for the audit store.

* projection row (``escalation_state``) -> :class:`~escalation.domain.escalation.Escalation`;
* ledger row (``escalation_audit``) -> :class:`~escalation.ports.LedgerRow`;
* :func:`chained_row`: the full ledger row for an event, hashed onto the dispute's chain.

Kept apart from ``audit_store`` so the transactional code reads as transactions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, NamedTuple
from uuid import UUID

from escalation.domain import audit_hash
from escalation.domain.escalation import Escalation, status_of
from escalation.domain.materiality import Materiality
from escalation.domain.timeutil import require_aware
from escalation.ports import LedgerRow


def utc(value: datetime) -> datetime:
    """``value`` (aware) converted to UTC; psycopg returns the session's time zone."""
    return value.astimezone(UTC)


def utc_opt(value: datetime | None) -> datetime | None:
    """:func:`utc` for a nullable column."""
    return None if value is None else value.astimezone(UTC)


def _aware_opt(value: datetime | None, name: str) -> datetime | None:
    return None if value is None else require_aware(value, name)


def escalation_from_state(row: Mapping[Any, Any]) -> Escalation:
    """Build the Escalation a projection row describes.

    ``due_at`` is NULL in the projection unless the escalation is pending; the value object
    needs a datetime, so a paused, terminal or cancelled escalation carries its
    ``entered_tier_at`` there (terminal: the instant of the terminal decision). Check
    ``status`` before trusting ``due_at``.
    """
    entered = utc(row["entered_tier_at"])
    due = utc_opt(row["due_at"]) or entered
    return Escalation(
        dispute_id=row["dispute_id"],
        tier=row["tier"],
        due_at=due,
        materiality=Materiality.parse(Decimal(row["materiality"])),
        source_hash=row["source_hash"],
        ladder=row["ladder"],
        ladder_version=int(row["ladder_version"]),
        seq=int(row["last_seq"]),
        entered_tier_at=entered,
        trace_id=row["trace_id"],
        external_id=row["external_id"],
        regulatory_deadline=utc_opt(row["regulatory_deadline"]),
        status=status_of(row["status"]),
        deadlines=deadlines_from_json(row.get("deadlines")),
        institution_tz=row.get("institution_tz"),
        institution_calendar=row.get("institution_calendar"),
        source=row.get("source"),
    )


def deadlines_json(deadlines: Sequence[tuple[str, datetime]]) -> str | None:
    """The projection's ``deadlines`` JSONB text: ``[["name", "ISO 8601 UTC"], ...]`` in the
    ladder's order, or None when there are none."""
    if not deadlines:
        return None
    return json.dumps([[n, require_aware(at, n).isoformat()] for n, at in deadlines])


def deadlines_from_json(value: Any) -> tuple[tuple[str, datetime], ...]:
    """Inverse of :func:`deadlines_json` (accepts the decoded JSONB list, text, or None)."""
    if value is None:
        return ()
    items = json.loads(value) if isinstance(value, str) else value
    return tuple((str(n), utc(datetime.fromisoformat(str(at)))) for n, at in items)


class RowFacts(NamedTuple):
    """What one ledger row says beyond its dispute's projection (:func:`chained_row`): the
    ledger columns of the same names (instants aware). A tuple: it is built once per row on
    the firing path."""

    event: str
    match_decision: str
    actor: str
    decided_at: datetime
    from_tier: str | None
    to_tier: str | None
    due_at: datetime | None
    next_due_at: datetime | None
    fence_token: int | None = None
    calendar_version: str | None = None
    details: Mapping[str, Any] | None = None


def chained_row(state: Mapping[str, Any], facts: RowFacts) -> dict[str, Any]:
    """The next ledger row of ``state``'s chain, with ``seq``, ``prev_hash`` and ``row_hash``.

    Args:
        state: the dispute's projection *after* the event (ladder, materiality, trace id, ...)
            plus ``last_seq``/``last_hash`` *before* it (the chain head being extended).
        facts: the row's own columns (:class:`RowFacts`).

    Returns:
        A dict of every ledger column except ``recorded_at`` (the database assigns it).
        ``chain_created_at`` (the partition key, not hashed) is ``state["created_at"]``, or
        None when ``state`` has no projection row yet (enqueue fills it from RETURNING).

    Raises:
        InvalidInput: a value with no canonical hash form (naive datetime, float in details).
    """
    (event, match_decision, actor, decided_at, from_tier, to_tier, due_at, next_due_at,
     fence_token, calendar_version, details) = facts
    fields: dict[str, Any] = {
        "dispute_id": state["dispute_id"],
        "seq": int(state["last_seq"]) + 1,
        "event": event,
        "match_decision": match_decision,
        "from_tier": from_tier,
        "to_tier": to_tier,
        "ladder": state["ladder"],
        "ladder_version": int(state["ladder_version"]),
        "calendar_version": calendar_version,
        "materiality": Decimal(state["materiality"]),
        "due_at": _aware_opt(due_at, "due_at"),
        "next_due_at": _aware_opt(next_due_at, "next_due_at"),
        "regulatory_deadline": utc_opt(state["regulatory_deadline"]),
        "decided_at": require_aware(decided_at, "decided_at"),
        "actor": actor,
        "trace_id": state["trace_id"],
        "source_hash": state["source_hash"],
        "external_id": state["external_id"],
        "fence_token": fence_token,
        "details": dict(details or {}),
    }
    prev = bytes(state["last_hash"])
    fields["prev_hash"] = prev
    fields["row_hash"] = audit_hash.row_hash(prev, fields)
    fields["chain_created_at"] = state.get("created_at")
    return fields


def ledger_row(row: Mapping[Any, Any]) -> LedgerRow:
    """A ledger row as the port's :class:`LedgerRow` (hashes as lower-case hex)."""
    return LedgerRow(
        dispute_id=UUID(str(row["dispute_id"])),
        seq=int(row["seq"]),
        event=row["event"],
        match_decision=row["match_decision"],
        from_tier=row["from_tier"],
        to_tier=row["to_tier"],
        ladder=row["ladder"],
        ladder_version=int(row["ladder_version"]),
        materiality=format(Decimal(row["materiality"]), "f"),
        due_at=utc_opt(row["due_at"]),
        next_due_at=utc_opt(row["next_due_at"]),
        decided_at=utc(row["decided_at"]),
        recorded_at=utc_opt(row["recorded_at"]),
        actor=row["actor"],
        trace_id=row["trace_id"],
        source_hash=row["source_hash"],
        external_id=row["external_id"],
        fence_token=row["fence_token"],
        details=dict(row["details"] or {}),
        prev_hash=bytes(row["prev_hash"]).hex(),
        row_hash=bytes(row["row_hash"]).hex(),
        calendar_version=row.get("calendar_version"),
        regulatory_deadline=utc_opt(row.get("regulatory_deadline")),
        chain_created_at=utc_opt(row.get("chain_created_at")),
        source=row.get("source"),
    )
