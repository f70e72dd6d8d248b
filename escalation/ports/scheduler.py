"""The scheduler port (claim, apply, restore, cancel on a due-time index) and the pre-breach
warning queue, with the values that cross them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol
from uuid import UUID

from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation


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


MAX_OP_WARNINGS = 16
"""Most pre-breach warnings one :class:`ApplyOp` may carry (``ApplyOp.warnings``)."""


@dataclass(frozen=True, slots=True)
class ApplyOp:
    """One member's apply instruction, guarded by ``seq`` and (if given) the fencing token.

    Attributes:
        escalation: the state recorded in PostgreSQL (its ``seq`` is the guard: applied only
            if the payload's seq is older).
        action: reschedule / remove / park.
        token: fencing token from the claim, or None for an owner-less repair (reconcile).
        notify: fields for the review stream entry (None = no notification).
        warnings: pre-breach warnings of the tier this op enters, added to the shard's
            warnings ZSET (ZADD NX) in the same script call, only when the op is APPLIED
            (what ``WarningQueue.schedule`` does after an apply; empty = none); at most
            :data:`MAX_OP_WARNINGS`.
    """

    escalation: Escalation
    action: ApplyAction
    token: int | None = None
    notify: dict[str, str] | None = None
    warnings: tuple[WarningMember, ...] = ()


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

    def restore(self, escalations: Sequence[Escalation],
                notifications: Mapping[UUID, dict[str, str]] | None = None,
                ) -> list[ApplyOutcome]:
        """Owner-less repair from PostgreSQL state (reconcile, stuck members); sends the
        given notifications of decisions never applied, at most once (seq-guarded)."""
        ...

    def payload(self, dispute_id: UUID) -> dict[str, str] | None:
        """The Redis payload fields of ``dispute_id`` (``seq`` = last applied), or None."""
        ...

    def cancel(self, dispute_id: UUID, notify: dict[str, str] | None = None) -> bool:
        """Remove member, payload and lock atomically; False if nothing was there. ``notify``:
        a decision's entry, sent only if no apply moved the payload past its seq."""
        ...

    def notified(self, wanted: Mapping[str, tuple[str, int]], count: int = 1000) -> set[str]:
        """The idempotency keys among ``wanted`` (dispute id -> (``<dispute>:<seq>``, decided
        epoch ms)) that already have an entry in their shard's review stream (read only by
        the STUCK_MEMBER repair, as reconcile's ``SchedulerInspection.notified``)."""
        ...


@dataclass(frozen=True, slots=True)
class WarningMember:
    """One scheduled pre-breach warning: dispute, tier-entry seq, fraction text, due (epoch ms).

    Its text form (the warnings ZSET member) is ``"<dispute id>:<seq>:<fraction>"``.
    """

    dispute_id: UUID
    seq: int
    fraction: str
    due_ms: int

    @property
    def member(self) -> str:
        """ZSET member text ``"<id>:<seq>:<fraction>"``."""
        return f"{self.dispute_id}:{self.seq}:{self.fraction}"

    @classmethod
    def parse(cls, member: str, score: float) -> WarningMember:
        """Inverse of :attr:`member`. Raises InvalidInput for a malformed member."""
        try:
            did, seq, fraction = member.split(":")
            return cls(UUID(did), int(seq), fraction, int(score))
        except ValueError:
            raise InvalidInput(f"malformed warning member {member!r}") from None


class WarningQueue(Protocol):
    """Scheduled pre-breach warnings (adapter: ``adapters.redis_warnings.RedisWarnings``)."""

    next_due_ms: int | None
    """Earliest warning left after the last :meth:`claim` (epoch ms), None = none."""
    namespace: str
    """Key namespace of the queue (the scheduler's, see ``EncodedScheduler``)."""
    shards: int

    def schedule(self, members: Sequence[WarningMember]) -> int:
        """Add each member at its due time unless present. Returns how many were new."""
        ...

    def schedule_members(self, members: Sequence[tuple[str, int]]) -> int:
        """:meth:`schedule` of ``(WarningMember.member, due_ms)`` pairs."""
        ...

    def claim(self, max_items: int) -> tuple[datetime, list[WarningMember]]:
        """Take up to ``max_items`` (1..1000) due warnings, each handed out once.

        Returns (Redis TIME of the claim, members earliest first). Raises InvalidInput."""
        ...
