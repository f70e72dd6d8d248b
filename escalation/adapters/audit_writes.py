"""What each audit-store write appends: the ledger rows and projection changes of enqueue,
decisions (the record rule, ``domain.record_rule``) and single events.

Pure row building on plain dicts (projection rows as ``escalation_state`` columns), except
:func:`append_row`, which writes one event inside the caller's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from escalation.adapters.audit_rows import (
    RowFacts,
    chained_row,
    deadlines_json,
    escalation_from_state,
)
from escalation.adapters.tables import STATUSES, escalation_audit, escalation_state
from escalation.domain.decide import Decision
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation, Status, status_of
from escalation.domain.materiality import Materiality
from escalation.domain.record_rule import ProjectionHead, RecordRequest, plan_record
from escalation.domain.timeutil import require_aware
from escalation.ports import ClaimedItem, LedgerEvent, RecordOutcome, RecordStatus

_S = escalation_state
MUTABLE_STATE = frozenset(
    {
        "status",
        "tier",
        "ladder",
        "ladder_version",
        "due_at",
        "entered_tier_at",
        "materiality",
        "regulatory_deadline",
        "remaining_ms",
        "external_id",
        "deadlines",
        "obligations",
    }
)
"""Projection columns ``append_event(changes=...)`` may set."""


def enqueue_rows(
    esc: Escalation, actor: str, decided_at: datetime, calendar_version: str | None = None,
    extra: Mapping[str, object] | None = None,
) -> dict[str, Any]:
    """Projection row (seq 1) and its ENQUEUED ledger row for one new escalation.

    SLA timing (docs/sla.md): the row records ``calendar_version`` and, when the escalation
    has regulatory deadlines, all of them in ``details["deadlines"]`` (name -> ISO 8601 UTC).
    The projection row also holds the institution zone and calendar; ``extra``: more keys of the
    ENQUEUED row's details (provenance: attributes, each deadline's citation and rule, the
    deadline bounding the due time).

    The definition of the ENQUEUED row: the bulk write builds the same row through
    ``audit_enqueue.stage_line`` (a template for this fixed shape), and the tests compare
    the two.
    """
    state: dict[str, Any] = {
        "dispute_id": esc.dispute_id,
        "external_id": esc.external_id,
        "source": esc.source,
        "status": Status.PENDING.value,
        "tier": esc.tier,
        "ladder": esc.ladder,
        "ladder_version": esc.ladder_version,
        "due_at": esc.due_at,
        "entered_tier_at": esc.entered_tier_at,
        "materiality": esc.materiality.amount,
        "source_hash": esc.source_hash,
        "trace_id": esc.trace_id,
        "regulatory_deadline": esc.regulatory_deadline,
        "deadlines": deadlines_json(esc.deadlines),
        "institution_tz": esc.institution_tz,
        "institution_calendar": esc.institution_calendar,
        "remaining_ms": None,
        "last_seq": 0,
        "last_hash": b"\x00" * 32,
    }
    ledger = chained_row(state, RowFacts(
        event="ENQUEUED",
        match_decision="ENQUEUED",
        actor=actor,
        decided_at=decided_at,
        from_tier=None,
        to_tier=esc.tier,
        due_at=esc.due_at,
        next_due_at=esc.due_at,
        calendar_version=calendar_version,
        details={
            "entered_tier_at": esc.entered_tier_at.isoformat(),  # SLA report: time in tier
            **({"deadlines": {n: at.isoformat() for n, at in esc.deadlines}}
               if esc.deadlines else {}),
            **(extra or {}),
        }))
    state["last_seq"] = 1
    state["last_hash"] = ledger["row_hash"]
    return {"state": state, "ledger": ledger}


def projection_head(state: Mapping[str, Any]) -> ProjectionHead:
    """The record rule's view of a locked projection row."""
    return ProjectionHead(
        status=status_of(state["status"]),
        last_seq=int(state["last_seq"]),
        tier=state["tier"],
        due_at=state["due_at"],
        regulatory_deadline=state["regulatory_deadline"],
    )


def apply_decisions(
    states: dict[UUID, dict[str, Any]],
    items: Sequence[tuple[ClaimedItem, Decision]],
    actor: str,
) -> tuple[list[RecordOutcome], list[dict[str, Any]], dict[UUID, dict[str, Any]]]:
    """Run the record rule (``domain.record_rule.plan_record``) per item against the locked
    ``states`` (mutated in place, so a dispute repeated in the batch sees its new head).

    Returns (outcomes in input order, ledger rows to insert, final state per moved dispute).
    """
    outcomes: list[RecordOutcome] = []
    ledger: list[dict[str, Any]] = []
    moved: dict[UUID, dict[str, Any]] = {}
    for claimed, decision in items:
        state = states.get(claimed.escalation.dispute_id)
        plan = plan_record(RecordRequest(
            None if state is None else projection_head(state), claimed.escalation.seq, decision))
        if state is None or plan.entry is None or plan.head is None:
            outcomes.append(RecordOutcome(
                plan.status, None if state is None else escalation_from_state(state)))
            continue
        entry, after = plan.entry, plan.head
        state["regulatory_deadline"] = after.regulatory_deadline
        row = chained_row(state, RowFacts(
            event=entry.event,
            match_decision=entry.match_decision,
            actor=actor,
            decided_at=entry.decided_at,
            from_tier=entry.from_tier,
            to_tier=entry.to_tier,
            due_at=entry.due_at,
            next_due_at=entry.next_due_at,
            fence_token=claimed.token,
            calendar_version=entry.calendar_version,
            details=({"deadline": decision.deadline_detail}
                     if decision.deadline_detail is not None else None)))
        ledger.append(row)
        state.update(
            tier=after.tier,
            status=after.status.value,
            due_at=after.due_at,
            entered_tier_at=plan.entered_tier_at,
            last_seq=row["seq"],
            last_hash=row["row_hash"],
        )
        moved[state["dispute_id"]] = state
        outcomes.append(RecordOutcome(RecordStatus.RECORDED, escalation_from_state(state)))
    return outcomes, ledger, moved


def clean_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Validate and normalise ``append_event`` changes. Raises InvalidInput."""
    unknown = set(changes) - MUTABLE_STATE
    if unknown:
        raise InvalidInput(f"cannot change projection column(s) {sorted(unknown)}")
    clean = dict(changes)
    if "status" in clean:
        clean["status"] = str(Status(clean["status"]).value)
        if clean["status"] not in STATUSES:  # pragma: no cover - Status mirrors STATUSES
            raise InvalidInput(f"unknown status {clean['status']!r}")
    if "materiality" in clean:
        clean["materiality"] = Materiality.parse(clean["materiality"]).amount
    for name in ("due_at", "entered_tier_at", "regulatory_deadline"):
        if clean.get(name) is not None:
            clean[name] = require_aware(clean[name], name)
    for name in ("deadlines", "obligations"):  # ((name, aware instant), ...) -> JSON array
        if name in clean:  # decoded: the JSONB column type encodes it (text became a string)
            text = deadlines_json(tuple(clean[name] or ()))
            clean[name] = None if text is None else json.loads(text)
    return clean


def append_row(conn: sa.Connection, state: dict[str, Any], entry: LedgerEvent) -> Escalation:
    """Append ``entry``'s chained ledger row for ``state`` (locked) and apply its
    ``changes`` (``entry.dispute_id`` and ``entry.expected_seq`` are the caller's: ``state``
    is the row it locked and checked)."""
    changes = entry.changes
    before = dict(state)
    after = {**state, **changes}
    if after["status"] != Status.PENDING.value and "due_at" not in changes:
        after["due_at"] = None
    if after["status"] == Status.PENDING.value and after["due_at"] is None:
        raise InvalidInput("a pending escalation needs due_at")
    row = chained_row(after, RowFacts(
        event=entry.event,
        match_decision=entry.match_decision,
        actor=entry.actor,
        decided_at=entry.decided_at,
        from_tier=before["tier"],
        to_tier=after["tier"],
        due_at=before["due_at"],
        next_due_at=after["due_at"],
        calendar_version=entry.calendar_version,
        details=entry.details))
    conn.execute(sa.insert(escalation_audit), [row])
    values = {k: after[k] for k in MUTABLE_STATE}
    values.update(last_seq=row["seq"], last_hash=row["row_hash"])
    conn.execute(
        sa.update(_S)
        .where(_S.c.dispute_id == state["dispute_id"])
        .values(**values, updated_at=sa.func.clock_timestamp())
    )
    after.update(last_seq=row["seq"], last_hash=row["row_hash"])
    return escalation_from_state(after)
