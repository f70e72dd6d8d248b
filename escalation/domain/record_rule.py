"""The record rule: may a worker's decision be recorded against the projection it locked?

The commit point of a firing (docs/architecture.md, "The firing protocol", step 3) is a
compare-and-set on ``seq``: a decision taken on a claimed payload is recorded only if the
dispute's projection is still pending at the very seq the payload carried. Anything else
means PostgreSQL already holds a newer decision (or none at all), and the worker must apply
that state instead of its own. This module is that rule, pure and typed; the PostgreSQL
adapter (``adapters.audit_store``) and the in-memory fake of the tests both call it under
their own locking.

The rule's values are immutable named tuples rather than frozen dataclasses: four of them
are built per recorded decision on the firing path, and a named tuple costs about a third
of a frozen dataclass's ``__init__``.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import NamedTuple

from escalation.domain.decide import Decision, DecisionKind
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Status
from escalation.domain.timeutil import require_aware


class RecordStatus(StrEnum):
    """Per-item result of recording a decision."""

    RECORDED = "recorded"  # a new ledger row; projection moved to seq + 1
    STALE = "stale"  # projection seq != claimed seq: a newer decision exists (apply it)
    UNKNOWN = "unknown"  # no projection row for this dispute
    CLOSED = "closed"  # projection terminal/cancelled: remove from Redis


class ProjectionHead(NamedTuple):
    """What the rule reads of a dispute's locked projection row.

    Attributes:
        status: the projection's status.
        last_seq: seq of the dispute's latest ledger row (the chain head), >= 0.
        tier: current tier id.
        due_at: aware UTC end of the current SLA window (None unless pending).
        regulatory_deadline: aware UTC regulatory deadline of the current tier, or None.
    """

    status: Status
    last_seq: int
    tier: str
    due_at: datetime | None
    regulatory_deadline: datetime | None


class RecordRequest(NamedTuple):
    """One decision to record.

    Attributes:
        head: the locked projection of the dispute, or None when PostgreSQL has no row.
        claimed_seq: the ``seq`` of the claimed Redis payload the decision was taken on.
        decision: a PROMOTED or TERMINAL :class:`~escalation.domain.decide.Decision`.
    """

    head: ProjectionHead | None
    claimed_seq: int
    decision: Decision


class LedgerEntry(NamedTuple):
    """The ledger row to append (the columns the rule decides; the chain adds the rest).

    ``seq`` is ``last_seq + 1``; ``due_at`` is the window that ended, ``next_due_at`` the
    next tier's (None for terminal).
    """

    seq: int
    event: str  # "PROMOTED" or "TERMINAL"
    match_decision: str
    from_tier: str
    to_tier: str | None
    due_at: datetime | None
    next_due_at: datetime | None
    decided_at: datetime
    calendar_version: str | None


class RecordPlan(NamedTuple):
    """The rule's typed outcome for one :class:`RecordRequest`.

    Attributes:
        status: RECORDED / STALE / UNKNOWN / CLOSED.
        entry: the ledger row to append (only when RECORDED).
        head: the projection after the decision when RECORDED (status, tier, due, seq);
            else the unchanged input head (None for UNKNOWN).
        entered_tier_at: when RECORDED, the instant the dispute entered its new tier (the
            decision time); else None.
    """

    status: RecordStatus
    entry: LedgerEntry | None
    head: ProjectionHead | None
    entered_tier_at: datetime | None = None


def check_recordable(decision: Decision) -> None:
    """Refuse a decision that has nothing to record.

    Raises:
        InvalidInput: a NOT_DUE decision, a promotion without ``to_tier`` or
            ``next_due_at``, or a naive ``decided_at``.
    """
    if decision.kind is DecisionKind.NOT_DUE:
        raise InvalidInput("a NOT_DUE decision has nothing to record")
    if decision.kind is DecisionKind.PROMOTED and (
        decision.next_due_at is None or decision.to_tier is None
    ):
        raise InvalidInput("a promotion needs to_tier and next_due_at")
    require_aware(decision.decided_at, "decided_at")


def plan_record(request: RecordRequest) -> RecordPlan:
    """Apply the record rule (a compare-and-set on seq) to one decision.

    * no projection -> UNKNOWN (the Redis member has no system-of-record entry);
    * terminal or cancelled projection -> CLOSED (the member must leave Redis);
    * paused, or ``last_seq`` != ``claimed_seq`` -> STALE (a newer decision exists);
    * else RECORDED: a PROMOTED/TERMINAL ledger entry at ``last_seq + 1`` and the new head
      (promoted: next tier, pending, due = ``next_due_at``; terminal: same tier, terminal,
      no due). A decision's ``regulatory_deadline`` (the next tier's) replaces the head's.

    Raises:
        InvalidInput: see :func:`check_recordable`.
    """
    decision = request.decision
    check_recordable(decision)
    head = request.head
    if head is None:
        return RecordPlan(RecordStatus.UNKNOWN, None, None)
    if head.status in (Status.TERMINAL, Status.CANCELLED, Status.RESOLVED):
        return RecordPlan(RecordStatus.CLOSED, None, head)
    if head.status is not Status.PENDING or head.last_seq != request.claimed_seq:
        return RecordPlan(RecordStatus.STALE, None, head)
    terminal = decision.kind is DecisionKind.TERMINAL
    entry = LedgerEntry(
        seq=head.last_seq + 1,
        event="TERMINAL" if terminal else "PROMOTED",
        match_decision=decision.match_decision,
        from_tier=decision.from_tier,
        to_tier=decision.to_tier,
        due_at=head.due_at,
        next_due_at=decision.next_due_at,
        decided_at=decision.decided_at,
        calendar_version=decision.calendar_version,
    )
    deadline = decision.regulatory_deadline
    after = ProjectionHead(
        status=Status.TERMINAL if terminal else Status.PENDING,
        last_seq=entry.seq,
        tier=head.tier if terminal or decision.to_tier is None else decision.to_tier,
        due_at=None if terminal else decision.next_due_at,
        regulatory_deadline=head.regulatory_deadline if deadline is None else deadline,
    )
    return RecordPlan(RecordStatus.RECORDED, entry, after, decision.decided_at)
