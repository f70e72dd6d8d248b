"""Ports: the Protocols the service layer depends on, and the values that cross them.

Adapters implement them against real servers (``adapters.redis_scheduler.RedisScheduler``,
``adapters.audit_store.PostgresAuditStore``); unit tests of the service layer may use small
in-memory fakes of these ports (never of Redis itself).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol
from uuid import UUID

from escalation.domain.decide import Decision
from escalation.domain.escalation import Escalation, Status
from escalation.domain.ladder import Ladder


# --------------------------------------------------------------------------- scheduler
@dataclass(frozen=True, slots=True)
class ClaimedItem:
    """One member taken by ``claim``: its fencing token and payload (seq = last applied)."""

    escalation: Escalation
    token: int
    score_ms: int


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """What one claim script call returns.

    Attributes:
        now: Redis TIME at the claim (aware UTC) -- the one clock.
        items: claimed members (locked, re-scored to now + lease).
        stuck: member ids that had no payload (STUCK_MEMBER), removed from the ZSET.
        contended: due members skipped because another worker holds their lock.
        next_due_ms: score of the earliest member still pending after the claim, or None.
    """

    now: datetime
    items: list[ClaimedItem]
    stuck: list[str] = field(default_factory=list)
    contended: int = 0
    next_due_ms: int | None = None


class ApplyAction(StrEnum):
    """What ``apply`` does to a member."""

    RESCHEDULE = "reschedule"  # write payload fields, ZADD at due_ms
    REMOVE = "remove"  # terminal or cancelled: ZREM + DEL payload
    PARK = "park"  # paused: ZREM, keep payload with the recorded seq


@dataclass(frozen=True, slots=True)
class ApplyOp:
    """One member's apply instruction, guarded by ``seq`` and (if given) the fencing token.

    Attributes:
        escalation: the state recorded in PostgreSQL (its ``seq`` is the guard: applied only
            if the payload's seq is older).
        action: reschedule / remove / park.
        token: fencing token from the claim, or None for an owner-less repair (reconcile).
        notify: fields for the review stream entry (None = no notification).
    """

    escalation: Escalation
    action: ApplyAction
    token: int | None = None
    notify: dict[str, str] | None = None


class ApplyOutcome(StrEnum):
    """Per-item result of ``apply``."""

    APPLIED = "applied"
    STALE_SEQ = "stale_seq"  # payload already at or past this seq: nothing to do
    NOT_OWNER = "not_owner"  # lock held by another token (or gone): stale worker refused
    MISSING = "missing"  # no payload (cancelled meanwhile): nothing brought back


class Scheduler(Protocol):
    """The Redis sorted-set scheduler (adapter: ``adapters.redis_scheduler.RedisScheduler``)."""

    def time(self) -> datetime:
        """Redis TIME as an aware UTC datetime (the one clock)."""
        ...

    def enqueue_many(self, escalations: Sequence[Escalation]) -> list[bool]:
        """Add payload + score atomically per escalation; False where already scheduled."""
        ...

    def claim(self, batch_size: int, lease_ms: int, worker_id: str) -> ClaimResult:
        """Atomically claim up to ``batch_size`` due members (see claim.lua)."""
        ...

    def apply(self, ops: Sequence[ApplyOp]) -> list[ApplyOutcome]:
        """Apply recorded decisions under the seq + fencing-token guard (see apply.lua)."""
        ...

    def restore(self, escalations: Sequence[Escalation]) -> list[ApplyOutcome]:
        """Owner-less repair from PostgreSQL state (reconcile, stuck members)."""
        ...

    def cancel(self, dispute_id: UUID) -> bool:
        """Remove member, payload and lock atomically; False if nothing was there."""
        ...


class LadderSource(Protocol):
    """Versioned ladders (adapter: ``adapters.ladder_files.LadderCatalog``)."""

    def get(self, name: str, version: int) -> Ladder:
        """One ladder version. Raises LadderError if unknown."""
        ...

    def latest(self, name: str) -> Ladder:
        """The highest version of ``name``. Raises LadderError if unknown."""
        ...


# --------------------------------------------------------------------------- audit log
class RecordStatus(StrEnum):
    """Per-item result of recording a decision."""

    RECORDED = "recorded"  # a new ledger row; projection moved to seq + 1
    STALE = "stale"  # projection seq != claimed seq: a newer decision exists (apply it)
    UNKNOWN = "unknown"  # no projection row for this dispute
    CLOSED = "closed"  # projection terminal/cancelled: remove from Redis


@dataclass(frozen=True, slots=True)
class RecordOutcome:
    """Result of recording one decision: the state PostgreSQL now holds for the dispute."""

    status: RecordStatus
    state: Escalation | None


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """One append-only ledger row (see docs/architecture.md, "The ledger"; docs/audit.md).

    Who: ``actor`` (worker id or admin). What: ``event``, ``match_decision``, ``from_tier``,
    ``to_tier``, ``ladder``/``ladder_version``, ``calendar_version``, ``materiality``
    (decimal string). When: ``due_at``, ``decided_at`` (Redis TIME for worker decisions),
    ``recorded_at`` (database clock at insert), ``regulatory_deadline``; all aware UTC. Why /
    provenance: ``trace_id``, ``source_hash``, ``details``. Chain: ``prev_hash``/``row_hash``
    (hex); ``chain_created_at`` is the partition key (the dispute's creation time).
    """

    dispute_id: UUID
    seq: int
    event: str
    match_decision: str
    from_tier: str | None
    to_tier: str | None
    ladder: str
    ladder_version: int
    materiality: str
    due_at: datetime | None
    next_due_at: datetime | None
    decided_at: datetime
    recorded_at: datetime | None
    actor: str
    trace_id: str
    source_hash: str
    external_id: str | None
    fence_token: int | None
    details: dict[str, Any]
    prev_hash: str
    row_hash: str
    # Issue 5 (additive): the rest of "who, what, when and why" (docs/audit.md).
    calendar_version: str | None = None
    regulatory_deadline: datetime | None = None
    chain_created_at: datetime | None = None


class AuditLog(Protocol):
    """The PostgreSQL system of record: ledger (append only) + projection."""

    def record_enqueue_many(
        self, escalations: Sequence[Escalation], actor: str, decided_at: datetime,
        calendar_versions: Mapping[UUID, str] | None = None,
        details: Mapping[UUID, Mapping[str, object]] | None = None,
    ) -> list[tuple[bool, Escalation]]:
        """Record ENQUEUED rows; (created, state) per escalation, idempotent per dispute.
        ``calendar_versions``: dispute id -> calendar version recorded on the row.
        ``details``: dispute id -> extra ledger details (institution zone/calendar,
        attributes, each deadline's citation, the deadline bounding the due time)."""
        ...

    def record_decisions(
        self, items: Sequence[tuple[ClaimedItem, Decision]], actor: str
    ) -> list[RecordOutcome]:
        """Record a batch of decisions in one transaction (the commit point)."""
        ...

    def record_cancel(
        self, dispute_id: UUID, actor: str, decided_at: datetime, reason: str
    ) -> Escalation:
        """Record a CANCELLED row. Raises NotFound / ConflictError."""
        ...

    def record_stuck(
        self, dispute_id: UUID, actor: str, decided_at: datetime
    ) -> Escalation | None:
        """Record a STUCK_MEMBER row; None if PostgreSQL does not know the dispute."""
        ...

    def get(self, dispute_id: UUID) -> tuple[Escalation, Status] | None:
        """Current projection state and status, or None."""
        ...

    def unapplied_decisions(
        self, ranges: Sequence[tuple[UUID, int, int]]
    ) -> dict[UUID, LedgerRow]:
        """Latest PROMOTED/TERMINAL row with after < seq <= upto per (dispute, after, upto)."""
        ...


class EventLog(Protocol):
    """The audit-store methods of the non-firing use cases (pause/resume, warnings):
    read a dispute's state and trail, append one event under a seq compare-and-set."""

    def get(self, dispute_id: UUID) -> tuple[Escalation, Status] | None:
        """Projection state and status, or None."""
        ...

    def trail(self, dispute_id: UUID) -> list[LedgerRow]:
        """Ledger rows of one dispute, oldest first."""
        ...

    def append_event(
        self, dispute_id: UUID, event: str, match_decision: str, actor: str,
        decided_at: datetime, changes: dict[str, Any], details: dict[str, Any], *,
        expected_seq: int | None = None, calendar_version: str | None = None,
    ) -> Escalation:
        """Append one ledger row + projection change (CAS on seq). Raises ConflictError."""
        ...
