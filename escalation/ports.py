"""Ports: the Protocols the service layer depends on, and the values that cross them.

Adapters implement them against real servers (``adapters.redis_scheduler.RedisScheduler``,
``adapters.audit_store.PostgresAuditStore``); unit tests of the service layer may use small
in-memory fakes of these ports (never of Redis itself).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from escalation.domain.access import Role, TokenInfo
from escalation.domain.calendars import CalendarRegistry
from escalation.domain.decide import Decision
from escalation.domain.errors import InvalidInput, InvalidParameter
from escalation.domain.escalation import Escalation, Status, check_text
from escalation.domain.ladder import Ladder
from escalation.domain.ladder_ledger import ReleaseEvent
from escalation.domain.ladder_plan import Blocked, PlanItem
from escalation.domain.record_rule import RecordStatus as RecordStatus  # noqa: PLC0414 -- re-export
from escalation.domain.values import fast_init


# --------------------------------------------------------------------------- scheduler
@fast_init
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


@fast_init
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


@fast_init
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


class LadderSource(Protocol):
    """Versioned ladders (adapter: ``adapters.ladder_files.LadderCatalog``)."""

    def get(self, name: str, version: int) -> Ladder:
        """One ladder version. Raises LadderError if unknown."""
        ...

    def latest(self, name: str) -> Ladder:
        """The highest version of ``name``. Raises LadderError if unknown."""
        ...


# --------------------------------------------------------------------------- audit log
@fast_init
@dataclass(frozen=True, slots=True)
class RecordOutcome:
    """Result of recording one decision: the state PostgreSQL now holds for the dispute."""

    status: RecordStatus
    state: Escalation | None


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """One append-only ledger row (docs/architecture.md, "Where the truth lives";
    docs/audit.md).

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
    # Added later, with defaults so a row built without them stays valid: the rest of
    # "who, what, when and why" (docs/audit.md).
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

    def get_many(self, dispute_ids: Iterable[UUID]) -> dict[UUID, Escalation]:
        """Current projection states by dispute id, in one read (unknown ids absent)."""
        ...

    def unapplied_decisions(
        self, ranges: Sequence[tuple[UUID, int, int]]
    ) -> dict[UUID, LedgerRow]:
        """Latest PROMOTED/TERMINAL row with after < seq <= upto per (dispute, after, upto)."""
        ...


class RowTemplate(Protocol):
    """Renders the write of one escalation that differs from a prototype only in its
    dispute id (canonical UUID string), external id, source hash and trace id."""

    ok: bool
    """True when the template renders rows itself (else each row takes the general path)."""

    def prepare(self) -> None:
        """Build the template (worth it for a shape seen more than once); sets ``ok``."""
        ...

    def render(self, dispute_id: str, external_id: str | None, source_hash: str,
               trace_id: str) -> Any:
        """The rendered row (picklable; the matching ``record``/``enqueue`` method's input)."""
        ...


@runtime_checkable
class StagedEnqueueLog(Protocol):
    """The bulk ENQUEUED write of the CSV import (adapter: ``AuditStore``)."""

    def enqueued_line_template(
        self, proto: Escalation, actor: str, decided_at: datetime,
        calendar_version: str | None, details: Mapping[str, object] | None,
    ) -> RowTemplate:
        """The template of ``proto``'s ENQUEUED row (as ``record_enqueue_many`` writes it)."""
        ...

    def get_many(self, dispute_ids: Iterable[UUID]) -> dict[UUID, Escalation]:
        """Recorded states by dispute id, in one read (unknown ids absent)."""
        ...

    def record_staged(self, lines: Sequence[str], actor: str) -> set[str]:
        """Record rendered rows in one transaction; the dispute ids recorded now."""
        ...


@runtime_checkable
class EncodedScheduler(Protocol):
    """The bulk Redis enqueue of the CSV import (adapter: ``RedisScheduler``)."""

    def payload_template(self, proto: Escalation) -> RowTemplate:
        """The template of ``proto``'s enqueue (as ``enqueue_many`` writes it)."""
        ...

    namespace: str
    """Key namespace: the warnings it writes are those of a warnings queue of the same
    namespace and shards."""
    shards: int

    def enqueue_encoded(self, items: Sequence[Any],
                        warnings: Sequence[tuple[tuple[str, int], ...] | None] | None = None,
                        ) -> list[bool]:
        """``enqueue_many`` of rendered rows; False where already scheduled. ``warnings``
        (one entry per row, or None): the pre-breach warnings of each row as
        ``(member suffix after the dispute id, due epoch ms)`` pairs, scheduled in the same
        call for the rows it newly schedules."""
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
        """Append one ledger row + projection change (CAS on seq). Raises ConflictError, or
        DuplicateEvent when a uniqueness rule of the ledger refuses the row."""
        ...


# --------------------------------------------------------------------------- reliability
DEAD_DECISION = "decision:"
"""Dead-letter member prefix of a poison escalation: ``decision:<dispute id>``."""
DEAD_NOTIFY = "notify:"
"""Dead-letter member prefix of an undeliverable notification: ``notify:<group>|<id>:<seq>``."""


@dataclass(frozen=True, slots=True)
class MemberState:
    """What Redis holds for one dispute (reconcile inspection).

    Attributes:
        payload_seq: the payload's ``seq`` field, None when there is no payload.
        score_ms: due time (epoch ms) if the dispute is scheduled -- its pending score, or for a
            member of the ready ZSET (due, waiting for a claim) its ready score +
            weight * aging_ms -- None when it is in neither.
        locked: a lock key exists (a worker holds the claim).
        dead: the dispute is dead-lettered as a poison decision.
        ready: the member sits in the ready ZSET (scheduled and due).
    """

    payload_seq: int | None
    score_ms: int | None
    locked: bool
    dead: bool
    ready: bool = False


class SchedulerInspection(Protocol):
    """Reads and owner-less repairs of the scheduler's Redis state that reconcile needs
    (adapter: ``adapters.redis_reliability.ReliabilityRedis``)."""

    def inspect(self, dispute_ids: Sequence[str]) -> dict[str, MemberState]:
        """Payload seq, due time, lock and dead-letter flag of each dispute id."""
        ...

    def scan_shards(self, count: int = 1000) -> Iterator[list[list[tuple[str, int]]]]:
        """Per shard, its scheduled members in chunks of about ``count``: ``(member, due
        epoch ms)``. A member may appear twice within one shard (callers use sets)."""
        ...

    def remove_member(self, member: str, recorded_seq: int | None, mode: str) -> str:
        """Remove (``mode`` "remove") or unpark a member the ledger does not schedule:
        ``removed`` | ``locked`` | ``ahead`` | ``behind`` | ``absent``."""
        ...

    def notified(self, wanted: Mapping[str, tuple[str, int]], count: int = 1000) -> set[str]:
        """The idempotency keys among ``wanted`` (dispute id -> (``<dispute>:<seq>``, decided
        epoch ms)) that already have an entry in their shard's review stream."""
        ...


class ResyncMark(Protocol):
    """The namespace's resync mark: set while Redis may be ahead of the ledger (a restore to
    an earlier point, a failover that lost commits); workers refuse to fire the namespace
    while it is set, ``reconcile`` resets Redis to the ledger and clears it (adapter:
    ``adapters.redis_binding.NamespaceBinding``; ADR 0014)."""

    def resync(self) -> dict[str, Any] | None:
        """The mark (``{"reason", "since_ms", "detail"}``), or None when not set."""
        ...

    def mark_resync(self, reason: str, detail: str = "") -> None:
        """Set the mark unless set already (``reason``: a code such as ``ahead_on_claim``)."""
        ...

    def clear_resync(self) -> bool:
        """Delete the mark; True when one was set."""
        ...


class DeadLetterQueue(Protocol):
    """The dead-letter set and its scripts (adapter:
    ``adapters.redis_reliability.ReliabilityRedis``; see ``service_layer.dead_letters``)."""

    def now_ms(self) -> int:
        """Redis TIME, epoch milliseconds."""
        ...

    def count_decision_failure(self, dispute_id: str) -> int:
        """Count one more failed decision; returns the count so far."""
        ...

    def dead_letter_decision(self, dispute_id: str, token: int, record_json: str) -> int:
        """Dead-letter a poison escalation under its claim token; dead-lettered time (epoch
        ms), 0 when the token no longer holds the lock."""
        ...

    def dead_list(self, limit: int = 100) -> list[tuple[str, int, dict[str, Any]]]:
        """Dead letters, oldest first: ``(member, dead-lettered ms, record)``."""
        ...

    def dead_get(self, member: str) -> tuple[int, dict[str, Any]] | None:
        """One dead letter's (dead-lettered ms, record), or None."""
        ...

    def retry_dead(self, member: str, kind: str, target: str, record_json: str) -> str:
        """Schedule a dead letter again, due now. Returns the script outcome."""
        ...

    def dead_count(self) -> int:
        """Dead letters over every shard (ZCARD: the dead-letter cap's cheap check)."""
        ...

    def purge_dead(self, member: str, dispute_id: str | None) -> None:
        """Remove a dead letter (and, for a poison escalation, its Redis state)."""
        ...


class ReviewStreams(Protocol):
    """The review streams (one per shard) that notifications are read from, with their retry
    and dead-letter scripts (adapter: ``adapters.redis_reliability.ReliabilityRedis``; see
    ``service_layer.notify``). Entry fields and ids are strings."""

    def now_ms(self) -> int:
        """Redis TIME, epoch milliseconds."""
        ...

    def review_shards(self) -> range:
        """Shard indexes, 0 first."""
        ...

    def ensure_review_group(self, shard: int, group: str) -> None:
        """Create consumer group ``group`` on the shard's stream (idempotent)."""
        ...

    def review_autoclaim(
        self, shard: int, group: str, consumer: str, idle_ms: int, count: int
    ) -> list[tuple[str, dict[str, str] | None]]:
        """Take over entries pending longer than ``idle_ms`` (fields None: trimmed)."""
        ...

    def review_read(
        self, shard: int, group: str, consumer: str, count: int, block_ms: int | None
    ) -> list[tuple[str, dict[str, str]]]:
        """New entries for ``consumer`` (blocking up to ``block_ms``; None = no block)."""
        ...

    def review_ack(self, shard: int, group: str, entry_id: str) -> None:
        """Acknowledge one entry."""
        ...

    def notify_claim_retries(self, shard: int, count: int, lease_ms: int) -> list[tuple[str, str]]:
        """Due retries ``(member, record JSON)``, leased for ``lease_ms``."""
        ...

    def notify_retry_done(self, shard: int, member: str) -> None:
        """Drop a delivered retry."""
        ...

    def notify_retry_waiting(self, shard: int) -> list[tuple[str, int]]:
        """Every retry scheduled on the shard, ``(member, retry time epoch ms)``, earliest
        first (members of every consumer group; ``<group>|<dispute id>:<seq>``)."""
        ...

    def notify_defer(self, shard: int, group: str, entry_id: str, member: str, at_ms: int,
                     record_json: str) -> None:
        """Schedule a retry at ``at_ms`` (acknowledging ``entry_id`` when given)."""
        ...

    def dead_letter_notify(self, shard: int, member: str, record_json: str) -> int:
        """Dead-letter an undeliverable notification; dead-lettered time, epoch ms."""
        ...

    def count_notification(self, shard: int, outcome: str) -> None:
        """Count one delivery attempt (``outcome``: ``delivered`` or ``failed``) in the
        shard's stats, which the API's ``/metrics`` reads."""
        ...


# --------------------------------------------------------------------------- maintenance
@dataclass(frozen=True, slots=True)
class OccurrenceClaim:
    """An occurrence of a recurring job claimed for running: its slot (epoch ms) and the
    slots skipped since the last run."""

    occurrence_ms: int
    missed: int


class Lease(Protocol):
    """A leader lease (adapter: ``adapters.leader_lease.LeaderLease``)."""

    ttl_ms: int
    margin: float
    clock: Callable[[], float]

    def poll(self) -> bool:
        """Renew when leading, else try to acquire. Returns :meth:`is_leader`."""
        ...

    def is_leader(self) -> bool:
        """True while the last acquire/renew succeeded recently enough."""
        ...

    def release(self) -> bool:
        """Give the lease up; True if this holder had it."""
        ...

    def now_ms(self) -> int:
        """The shared clock (Redis TIME), epoch milliseconds."""
        ...


class MaintenanceRuns(Protocol):
    """Per-occurrence compare-and-set of recurring jobs (adapter:
    ``adapters.maintenance_runs.PostgresMaintenanceRuns``)."""

    def claim(self, job: str, interval_s: int, now_ms: int, actor: str) -> OccurrenceClaim | None:
        """Claim the job's occurrence ``floor(now_ms / interval) * interval``; None when that
        occurrence (or a later one) was already claimed."""
        ...

    def finish(self, job: str, status: str, details: dict[str, Any]) -> None:
        """Record a claimed run's outcome (``ok`` / ``failed``) and its JSON details."""
        ...

    def rows(self) -> list[dict[str, Any]]:
        """Every job's last run, by job name."""
        ...


# --------------------------------------------------------------------------- reports
class LedgerReports(Protocol):
    """Set-based reads of the ledger for reports (adapter:
    ``adapters.report_queries.PostgresReports``)."""

    def sla_rows(
        self, since: datetime, until: datetime
    ) -> tuple[datetime, list[dict[str, Any]]]:
        """(database clock now, every ledger row of the disputes with a decision or a
        regulatory deadline in ``[since, until)``, ordered by dispute then seq). Each row has
        dispute_id, seq, event, from_tier, to_tier, ladder, due_at, decided_at,
        regulatory_deadline, ladder_version, external_id, and enq_details (the ENQUEUED
        row's details), details_entered_at and state_entered_tier_at (the last three only
        on seq 1). A dispute counts when one of the deadlines its ENQUEUED row recorded
        falls in the window."""
        ...

    def dispute_rows(self, dispute_id: UUID) -> tuple[datetime, list[dict[str, Any]]]:
        """(database clock now, every ledger row of ``dispute_id`` by seq, with the columns
        of :meth:`sla_rows`); an empty list when the dispute has no chain."""
        ...


# --------------------------------------------------------------------------- ladder history
Replan = Callable[[Escalation], "tuple[PlanItem, datetime | None] | Blocked"]

@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One ``ladder_history`` row (times aware UTC)."""

    run_id: int
    ladder: str
    version: int
    checksum: str
    plan_hash: str
    applied_by: str
    started_at: datetime
    finished_at: datetime | None
    status: str
    planned: int
    migrated: int
    replanned: int
    skipped: int
    blocked: int
    not_owner: int
    last_dispute_id: UUID | None
    redis_synced_through: UUID | None
    error: str | None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ReleaseRow:
    """One ``ladder_release`` row: ``ladder@version`` is live with the file of ``checksum``
    (SHA-256 hex), released at ``released_at`` (aware UTC) by ``released_by`` for ``reason``.
    ``ledger``: where the release is on the ledger (its LADDER_RELEASED or LADDER_BASELINE
    row, ADR 0012); None for a release recorded before ladder events were ledger rows."""

    ladder: str
    version: int
    checksum: str
    released_at: datetime
    released_by: str
    reason: str
    ledger: ReleaseEvent | None = None


@dataclass(frozen=True, slots=True)
class Page:
    """One keyset page of open escalations: ``rows`` (raw projection rows by dispute id)
    and ``escalations`` (the same rows as domain objects, in dispute-id order)."""

    rows: dict[UUID, dict[str, Any]]
    escalations: list[Escalation]


@dataclass
class BatchResult:
    """What one :meth:`LadderHistoryStore.migrate_batch` transaction did.

    Attributes:
        migrated: the new projection states (to restore into Redis), in dispute-id order.
        replanned: items whose seq had moved (a worker decided meanwhile) and were re-planned.
        skipped: items already at the target version, closed, or gone.
        blocked: items that, re-planned, can no longer be migrated (left on their version).
        suppressed: items whose due time the grace floor moved (no retroactive breach).
    """

    migrated: list[Escalation] = field(default_factory=list)
    replanned: int = 0
    skipped: int = 0
    blocked: list[Blocked] = field(default_factory=list)
    suppressed: int = 0


class LadderVersions(LadderSource, Protocol):
    """A :class:`LadderSource` that can list a ladder's versions (adapter:
    ``adapters.ladder_files.LadderCatalog``)."""

    def versions(self, name: str) -> list[int]:
        """Versions of ladder ``name``, ascending (empty if unknown)."""
        ...


class LadderFiles(Protocol):
    """The ladder files of one directory as read now, released or not (adapter:
    ``adapters.ladder_files.LadderCatalog``): valid files, and one line per invalid file."""

    @property
    def path(self) -> Path:
        """The ladder directory."""
        ...

    @property
    def errors(self) -> list[str]:
        """One line per invalid file."""
        ...

    @property
    def calendars(self) -> CalendarRegistry | None:
        """The deployment's calendars the files are checked against (built-in plus the
        calendars file); None = the built-in ones."""
        ...

    def find(self, name: str, version: int) -> Ladder | None:
        """The valid file of ``name@version``, or None."""
        ...

    def all(self) -> list[Ladder]:
        """Every valid file, by name then version."""
        ...

    def verify(self, name: str, version: int, checksum: str) -> Ladder:
        """The file of released ``name@version`` if present, valid and with ``checksum``.
        Raises LadderReleaseError (message prefix ``RELEASE_BROKEN``) otherwise."""
        ...


class LadderDirectory(LadderVersions, Protocol):
    """The ladders ``ladder plan``/``apply`` read (adapters: ``LadderCatalog``,
    ``ReleasedLadders``): :meth:`on_disk` re-reads the files as they are now."""

    def on_disk(self) -> LadderFiles:
        """The files of the directory as they are now (released or not)."""
        ...


class LadderHistory(Protocol):
    """Ladder migration runs and their batched writes (adapter:
    ``adapters.ladder_history.LadderHistoryStore``; see ``service_layer.ladder_migration``)."""

    def applied_checksums(self) -> dict[tuple[str, int], str]:
        """(ladder, version) -> checksum of every released version and of the file each
        running or finished run applied (a release wins)."""
        ...

    def releases(self, ladder: str | None = None) -> dict[tuple[str, int], ReleaseRow]:
        """The ``ladder_release`` rows (of one ladder when given)."""
        ...

    def released_checksums(self) -> dict[tuple[str, int], str]:
        """(ladder, version) -> checksum of the file as released."""
        ...

    def release(
        self, *, ladder: str, version: int, checksum: str, released_by: str, reason: str,
        released_at: datetime,
    ) -> tuple[ReleaseRow, bool]:
        """Record a release and its LADDER_RELEASED ledger row (one transaction); ``(row,
        new)``. Raises ConflictError if released with another checksum."""
        ...

    def baseline(
        self, files: Mapping[str, Sequence[tuple[int, str]]], *, released_by: str, reason: str,
        released_at: datetime,
    ) -> list[ReleaseRow]:
        """Release ``files`` of the ladders with no release yet, each version with its
        LADDER_BASELINE ledger row, in one transaction."""
        ...

    def history(self, ladder: str | None = None) -> list[HistoryRow]:
        """Runs, oldest first (of one ladder when given)."""
        ...

    def open_run(self, ladder: str, version: int) -> HistoryRow | None:
        """The latest run of ``ladder@version`` that did not finish (running or failed)."""
        ...

    def start(
        self, *, ladder: str, version: int, checksum: str, plan_hash: str, applied_by: str,
        started_at: datetime, planned: int, reason: str = "",
    ) -> int:
        """Insert a running run; returns its id. Raises ConflictError if one is running."""
        ...

    def resume(self, run_id: int, applied_by: str, reason: str = "") -> None:
        """Mark a failed run running again. Raises ConflictError / NotFound."""
        ...

    def finish(
        self, run_id: int, status: str, finished_at: datetime, error: str | None = None
    ) -> None:
        """Set the run's final status (done | failed), finish time and error, and append the
        run's LADDER_APPLIED / LADDER_APPLY_FAILED row to the version's ledger chain in the
        same transaction (ADR 0012)."""
        ...

    def note_redis(self, run_id: int, through: UUID, not_owner: int) -> None:
        """Record how far the Redis side of the run has been restored."""
        ...

    def open_escalations(
        self, ladder: str, after: UUID | None, limit: int, *, below_version: int | None = None,
        at_version: int | None = None, through: UUID | None = None,
    ) -> list[Escalation]:
        """A keyset page (dispute id > ``after``) of the ladder's pending/paused escalations."""
        ...

    def open_page(
        self, ladder: str, after: UUID | None, limit: int, *, below_version: int,
    ) -> Page:
        """Like :meth:`open_escalations` (pinned below ``below_version``), with the raw rows."""
        ...

    def count_open(self, ladder: str, below_version: int) -> int:
        """How many pending/paused escalations of ``ladder`` are pinned below the version."""
        ...

    def states(self, ids: Sequence[UUID]) -> dict[UUID, Escalation]:
        """Projection states of ``ids`` (those that exist)."""
        ...

    def migrate_batch(
        self,
        run_id: int,
        batch: Sequence[tuple[PlanItem, datetime | None]],
        *,
        target_version: int,
        actor: str,
        decided_at: datetime,
        details: Mapping[str, Any],
        replan: Replan,
        through: UUID | None = None,
        blocked: int = 0,
        page_rows: Mapping[UUID, Mapping[str, Any]] | None = None,
        redis_note: tuple[UUID, int] | None = None,
        page_escalations: Mapping[UUID, Escalation] | None = None,
    ) -> BatchResult:
        """Migrate one batch in one transaction (LADDER_MIGRATED rows, projection, counters,
        resume points)."""
        ...


# --------------------------------------------------------------------------- ledger search
@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Search/export filters; None means "any". Times are aware, ``[since, until)`` on
    ``decided_at``. ``tier`` matches from_tier or to_tier; ``decision`` matches
    ``match_decision`` or ``event``; ``actor`` is the worker id or admin name."""

    dispute_id: UUID | None = None
    tier: str | None = None
    decision: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    actor: str | None = None
    ladder: str | None = None
    ladder_version: int | None = None

    def __post_init__(self) -> None:
        """Refuse a reversed window and text filters with control characters.

        Raises:
            InvalidInput: ``since`` after ``until`` (naive times are refused by :meth:`where`);
                a NUL, newline or other control character in ``tier``, ``decision``, ``actor``
                or ``ladder`` (PostgreSQL refuses NUL in text; no stored value holds one); a
                ladder version outside 1..2**31-1 (a PostgreSQL integer).
        """
        for name in ("tier", "decision", "actor", "ladder"):
            value = getattr(self, name)
            if value is not None:
                check_text(value, name)
        # parameters named by each interface's own spelling (--from / from): InvalidParameter
        if self.ladder_version is not None and not 1 <= self.ladder_version <= 2**31 - 1:
            raise InvalidParameter("{ladder_version} must be 1..{top}, got {got}",
                                   "ladder_version", top=2**31 - 1, got=self.ladder_version)
        if (
            self.since is not None and self.until is not None
            and self.since.tzinfo is not None and self.until.tzinfo is not None
            and self.since > self.until
        ):
            raise InvalidParameter("{from} ({since}) is after {to} ({until})", "from", "to",
                                   since=self.since.isoformat(), until=self.until.isoformat())


class LedgerSearch(Protocol):
    """Search and streaming reads of the ledger (adapter:
    ``adapters.audit_search.PostgresLedgerSearch``; see ``service_layer.audit_export``)."""

    def ledger_events(self) -> frozenset[str]:
        """Every ledger event name (ENQUEUED, PROMOTED, ...)."""
        ...

    def recorded_decisions(self) -> list[str]:
        """Every distinct ``match_decision`` recorded so far."""
        ...

    def search(self, flt: AuditFilter, limit: int,
               after: tuple[datetime, UUID, int] | None = None) -> list[LedgerRow]:
        """Rows matching ``flt``, by decided_at, dispute, seq; at most ``limit``; with
        ``after``, only rows strictly after that (decided_at, dispute, seq) key (keyset
        pages). Raises InvalidInput for naive times."""
        ...

    def count(self, flt: AuditFilter) -> int:
        """Number of rows matching ``flt``."""
        ...

    def stream(self, flt: AuditFilter, columns: Sequence[str]) -> Iterator[Mapping[Any, Any]]:
        """Matching rows (the given columns, raw values) by decided_at, dispute, seq, in one
        snapshot, without holding them all in memory."""
        ...


# --------------------------------------------------------------------------- checkpoints
@dataclass(frozen=True, slots=True)
class CheckpointSignature:
    """An Ed25519 signature (RFC 8032; ``value`` 64 bytes) over a checkpoint's digest and the
    raw public key (32 bytes) that made it (``adapters.signing``; ADR 0012)."""

    public_key: bytes
    value: bytes


class SignatureStatus(StrEnum):
    """How a stored checkpoint's signature reads under the configured public key."""

    VALID = "valid"
    UNSIGNED = "unsigned"
    WRONG_KEY = "wrong_key"
    INVALID = "invalid"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One sealed checkpoint (hashes as bytes; ``created_at`` aware UTC).

    ``retention_count`` / ``retention_hash``: the ``audit_retention`` rows it covers
    (``merkle.retention_hash``), ``retention_covered`` their ``name:action`` keys;
    ``signature``: stored with it. All are None on a checkpoint sealed before signatures were
    stored."""

    checkpoint_id: int
    created_at: datetime
    head_count: int
    heads_root: bytes
    prev_checkpoint_hash: bytes
    checkpoint_hash: bytes
    retention_count: int | None = None
    retention_hash: bytes | None = None
    signature: CheckpointSignature | None = None
    retention_covered: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class RetentionRecord:
    """One ``audit_retention`` row: a ledger partition removed by retention (times aware
    UTC; ``action`` ``detached`` or ``dropped``)."""

    partition_name: str
    range_from: datetime
    range_to: datetime
    row_count: int
    max_recorded_at: datetime | None
    retention_days: int
    action: str
    actor: str
    done_at: datetime

    @property
    def key(self) -> str:
        """``name:action``, the row's key (a checkpoint's ``retention_covered`` lists them)."""
        return f"{self.partition_name}:{self.action}"


class DigestSigner(Protocol):
    """Signs checkpoint digests with the operator's private key (``adapters.signing``)."""

    def sign_digest(self, digest: Mapping[str, Any]) -> CheckpointSignature:
        """The signature of ``digest`` (without any ``signature`` member)."""
        ...


class DigestVerifier(Protocol):
    """Checks checkpoint signatures under the configured public key (``adapters.signing``)."""

    def check_digest(self, digest: Mapping[str, Any],
                     signature: CheckpointSignature | None) -> SignatureStatus:
        """How ``signature`` over ``digest`` reads under the configured public key."""
        ...


@dataclass(frozen=True, slots=True)
class SealedHead:
    """One chain head sealed in a checkpoint, with the ledger row's hash at that seq now
    (None when the row is gone)."""

    dispute_id: UUID
    seq: int
    sealed_hash: bytes
    chain_created_at: datetime
    current_hash: bytes | None


class CheckpointSnapshot(Protocol):
    """Reads of the checkpoint tables inside one consistent snapshot."""

    def checkpoints(self) -> list[Checkpoint]:
        """Every checkpoint, by id."""
        ...

    def sealed_heads(self, checkpoint_id: int) -> list[SealedHead]:
        """The heads sealed in ``checkpoint_id`` joined with the ledger rows at their seq."""
        ...

    def checkpoint(self, checkpoint_id: object) -> Checkpoint | None:
        """One checkpoint by id (as a digest file names it), or None."""
        ...

    def projection_mismatches(self, dispute_id: UUID | None) -> list[tuple[UUID, str]]:
        """``(dispute_id, "column (projection X, ledger Y), ...")`` whose projection row
        (``escalation_state``) differs from what its ledger chain determines
        (``domain.projection``: status, tier, due time, deadlines, obligations, materiality,
        ladder, version, ids, regulatory deadline), streamed in this snapshot.
        ``dispute_id`` None: every dispute."""
        ...

    def retention_records(self) -> list[RetentionRecord]:
        """Every ``audit_retention`` row, by partition name and action."""
        ...

    def ledger_tables(self) -> dict[str, bool]:
        """Every table in the ledger partition schema -> whether it is attached to the
        ledger."""
        ...

    def database_now(self) -> datetime:
        """The database clock (aware UTC)."""
        ...

    def ledger_counts(self, dispute_id: UUID | None) -> tuple[int, int]:
        """``(disputes, ledger rows)`` of one dispute or of all."""
        ...


class CheckpointStore(Protocol):
    """Audit checkpoints in PostgreSQL (adapter: ``adapters.checkpoints.PostgresCheckpoints``;
    see ``service_layer.checkpoint``)."""

    def seal(
        self, actor: str, before_seal: Callable[[CheckpointSnapshot], None] | None = None,
        sign: Callable[[Checkpoint], CheckpointSignature] | None = None,
    ) -> Checkpoint:
        """Seal the current chain heads into the next checkpoint (one snapshot, one sealer
        at a time): heads sorted by dispute id, RFC 6962 root over ``merkle.head_leaf``,
        ``merkle.checkpoint_hash`` chained on the previous checkpoint's hash, the retention
        rows of the snapshot (``merkle.retention_hash`` and their keys).

        ``before_seal`` is called with the sealing snapshot (the same transaction, under the
        sealer's lock) before anything is written; whatever it raises aborts the seal.
        ``sign`` signs the new checkpoint (its digest) before it is written; the signature
        is stored with it."""
        ...

    def broken_chains(
        self, dispute_id: UUID | None,
        progress: Callable[[str, int, int | None], None] | None = None,
    ) -> list[tuple[UUID, int]]:
        """``(dispute_id, first bad seq)`` of the hash chains and projection heads;
        ``progress(stage, done, total)`` is called as chains are checked."""
        ...

    def retained_from(self) -> datetime | None:
        """End of the newest range removed by retention (chains created before it are gone)."""
        ...

    def snapshot(self) -> AbstractContextManager[CheckpointSnapshot]:
        """A read-only snapshot of the checkpoint tables and the ledger."""
        ...


# --------------------------------------------------------------------------- API tokens
class TokenStore(Protocol):
    """Where token digests live (adapter: ``adapters.token_store.PostgresTokenStore``)."""

    def insert(self, name: str, role: Role, digest: str, expires_at: datetime,
               sources: tuple[str, ...] | None = None, read_only: bool = False) -> TokenInfo:
        """Store a new token (``sources`` None = unscoped). Raises ConflictError if ``name``
        exists."""
        ...

    def by_digest(self, digest: str) -> tuple[TokenInfo, str] | None:
        """(token, stored digest) for a digest, or None."""
        ...

    def all(self) -> list[TokenInfo]:
        """Every token, by name."""
        ...

    def revoke(self, name: str, at: datetime) -> TokenInfo | None:
        """Set ``revoked_at`` (once) and end the token's console sessions; None if no such
        name."""
        ...

    def now(self) -> datetime:
        """The database clock (aware UTC): expiry is judged by one clock."""
        ...


@dataclass(frozen=True, slots=True)
class SessionSeen:
    """A console session id found live by ``SessionStore.touch``.

    ``token``: the session's token. ``age_s``: seconds since this id was issued (at sign-in
    or at its last rotation), database clock. ``rotated_ago_s``: None while the id is the
    session's current one; else seconds since it was rotated away (accepted only within the
    grace the caller passed)."""

    token: TokenInfo
    age_s: float
    rotated_ago_s: float | None


class SessionStore(Protocol):
    """Console sessions by id digest (adapter: ``adapters.token_store``). Every time is
    the database clock; a session lives while it is not ended, was seen within the idle
    timeout, is younger than its absolute lifetime and its token is active. A rotation
    gives the session a new id digest and keeps its absolute end."""

    def start(self, digest: str, token_name: str, lifetime_s: float) -> None:
        """Store a new session of ``token_name`` ending at the latest ``lifetime_s`` s on."""
        ...

    def touch(self, digest: str, idle_s: float, grace_s: float) -> SessionSeen | None:
        """The live session of ``digest`` (and mark it seen now), or None (unknown, ended,
        idle longer than ``idle_s``, past its lifetime, token revoked or expired). An id
        rotated away less than ``grace_s`` seconds ago is still found (``rotated_ago_s``)."""
        ...

    def rotate(self, digest: str, new_digest: str) -> bool:
        """Atomically end the live id ``digest`` (``rotated``) and store ``new_digest`` for
        the same token with the same absolute end. False (nothing written) if ``digest`` was
        not live: another request rotated or ended it first."""
        ...

    def end(self, digest: str, why: str) -> bool:
        """End a session (``why``: ``signed_out``, ``replaced``); False if it was not live."""
        ...


# --------------------------------------------------------------------------- console reads
@dataclass(frozen=True, slots=True)
class ChainEvent:
    """One ledger row of a dispute, reduced to what deadline outcomes need (aware UTC).

    ``actor``: who wrote the row. ``details``: the row's JSON details for the events the
    obligations rule reads (``ENQUEUED``, ``ACTION_RECORDED``, ``RESOLVED``, ``CANCELLED``),
    None for the others (the console does not load them).
    """

    seq: int
    event: str
    decided_at: datetime
    from_tier: str | None
    to_tier: str | None
    actor: str = ""
    details: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class DeadlineChain:
    """A dispute with regulatory deadlines and its ledger events (oldest first).

    ``deadlines``: ``((name, aware UTC instant), ...)``: every clock's instant
    (the projection's ``obligations``, else its ``deadlines``); the clocks themselves are
    rebuilt from the ENQUEUED row's details and the recorded actions (``events``), and this
    is their fallback for rows older than those details; ``ladder`` /
    ``ladder_version``: the version the dispute is pinned to now; ``institution_tz`` /
    ``institution_calendar``: the zone and base calendar the dispute counts in (None: the
    deployment's defaults), so lateness is counted in the calendar its deadline was.
    """

    dispute_id: UUID
    external_id: str | None
    ladder: str
    ladder_version: int
    deadlines: tuple[tuple[str, datetime], ...]
    events: tuple[ChainEvent, ...]
    institution_tz: str | None = None
    institution_calendar: str | None = None


@dataclass(frozen=True, slots=True)
class PendingEscalation:
    """One pending escalation of the projection (``due_at`` aware UTC, may be None)."""

    dispute_id: UUID
    external_id: str | None
    ladder: str
    ladder_version: int
    tier: str
    due_at: datetime | None
    entered_tier_at: datetime


class ConsoleQueries(Protocol):
    """Read-only queries of the compliance console (adapter:
    ``adapters.console_queries.PostgresConsoleQueries``)."""

    def now(self) -> datetime:
        """The database clock (aware UTC)."""
        ...

    def deadline_chains(
        self, since: datetime | None = None, until: datetime | None = None,
        dispute_id: UUID | None = None,
    ) -> list[DeadlineChain]:
        """Disputes having a clock (``COALESCE(obligations, deadlines)``) in ``[since,
        until)`` (None = unbounded), or the one ``dispute_id``, with their ledger events."""
        ...

    def open_miss_chains(
        self, now: datetime, closed_by_resolution: Sequence[tuple[str, int]],
    ) -> list[DeadlineChain]:
        """The candidates for a deadline missed and still open at ``now``: disputes with a
        clock at or before ``now``, except ended (resolved / cancelled) disputes pinned to a
        ``(ladder, version)`` of ``closed_by_resolution`` (every deadline there is met by the
        resolution, so an ended dispute has no open miss). A superset: the rule decides."""
        ...

    def pending(self) -> list[PendingEscalation]:
        """Every pending escalation (status ``pending``), by due time."""
        ...


# --------------------------------------------------------------------------- console: ops
@dataclass(frozen=True, slots=True)
class ShardDepth:
    """One Redis shard of the namespace as the console's operations page shows it.

    Attributes:
        shard: shard index (0-based).
        pending: members of the pending ZSET (claimed ones included: a claim re-scores).
        due: pending members whose score is at or before Redis TIME, plus ready ones.
        ready: members of the ready ZSET (due, waiting by materiality priority, ADR 0006).
        claimed: lock keys (claims held now).
        dead: dead letters of the shard.
        oldest_due_ms: the earliest due time (epoch ms) of a member due and not claimed,
            pending or ready (a ready member's due = score + weight x aging); None if none.
    """

    shard: int
    pending: int
    due: int
    ready: int
    claimed: int
    dead: int
    oldest_due_ms: int | None


@dataclass(frozen=True, slots=True)
class HeldClaim:
    """A claim held now (a lock key): ``worker`` (its worker id), ``dispute_id``,
    ``fencing_token``, ``lease_left_ms`` (the key's PTTL; -1 without expiry)."""

    shard: int
    dispute_id: str
    worker: str
    fencing_token: int
    lease_left_ms: int


@dataclass(frozen=True, slots=True)
class OpsSnapshot:
    """Redis's side of the operations page, read at ``now_ms`` (Redis TIME, epoch ms).

    ``leader_ttl_ms``: the maintenance leader lease's PTTL (None: no leader now; the lease
    holds a random token, not a worker id). Workers keep no heartbeat: ``claims`` are the
    only trace of live workers in Redis, and only of those holding a claim at that instant.
    """

    now_ms: int
    shards: tuple[ShardDepth, ...]
    claims: tuple[HeldClaim, ...]
    leader_ttl_ms: int | None


@dataclass(frozen=True, slots=True)
class MaintenanceRunRow:
    """One job's row of ``maintenance_runs`` (times aware UTC): the occurrence last claimed,
    when it started, its status (running | ok | failed), runs and missed counts, the worker
    that led it, and the details its job returned."""

    job: str
    last_occurrence: datetime
    last_run_at: datetime
    last_status: str
    runs: int
    missed: int
    last_leader: str
    details: Mapping[str, Any]


class ConsoleOpsReads(Protocol):
    """Read-only queries of the console's ladders and operations pages (adapter:
    ``adapters.console_ops.ConsoleOpsStore``, built by ``bootstrap.console_ops_for``)."""

    def releases(self) -> dict[tuple[str, int], ReleaseRow]:
        """Every ``ladder_release`` row by ``(ladder, version)``."""
        ...

    def apply_runs(self) -> list[HistoryRow]:
        """Every ``ladder apply`` run (``ladder_history``), newest first."""
        ...

    def snapshot(self) -> OpsSnapshot:
        """Queue depth per shard, firing lag, claims held and the leader lease (Redis)."""
        ...

    def maintenance_runs(self) -> list[MaintenanceRunRow]:
        """Every maintenance job's last run, by job name."""
        ...


# --------------------------------------------------------------------------- case file
@dataclass(frozen=True, slots=True)
class EvidenceFile:
    """One file a case file carries verbatim: its name, UTF-8 text and SHA-256 (hex)."""

    name: str
    text: str
    sha256: str


class CaseFileSources(Protocol):
    """The files behind a dispute's rows (adapter: ``adapters.evidence.EvidenceFiles``)."""

    def ladder_file(self, ladder: str, version: int) -> EvidenceFile | None:
        """The released file of ``ladder@version`` (its SHA-256 is the released checksum),
        or None when the deployment no longer has it."""
        ...

    def calendar_files(self) -> list[EvidenceFile]:
        """The institution calendars file, when one is configured (else the built-in
        calendars, which have no file: an empty list)."""
        ...


class DocumentSigner(Protocol):
    """Signs evidence documents with the checkpoint key (adapter:
    ``adapters.evidence.Ed25519DocumentSigner``; docs/audit.md)."""

    def sign(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """``document`` with a ``signature`` member ``{alg, public_key, value}``: Ed25519 over
        the canonical JSON of the document without that member (deterministic, RFC 8032)."""
        ...

    def public_key_pem(self) -> str:
        """The signing key's public half (SubjectPublicKeyInfo PEM)."""
        ...
