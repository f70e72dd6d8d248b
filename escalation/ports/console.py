"""The compliance console's read ports: disputes with their deadlines, pending escalations, and the
operations page's figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Protocol
from uuid import UUID

from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import check_text
from escalation.ports.ladders import HistoryRow, ReleaseRow


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
    """One pending (or paused) escalation of the projection (``due_at`` aware UTC, None
    while paused; ``remaining_ms``: the SLA time left when it was paused)."""

    dispute_id: UUID
    external_id: str | None
    ladder: str
    ladder_version: int
    tier: str
    due_at: datetime | None
    entered_tier_at: datetime
    status: str = "pending"
    remaining_ms: int | None = None


@dataclass(frozen=True, slots=True)
class TierCount:
    """Pending escalations of one (ladder, version, tier) at ``now``: all of them, those due
    in ``(now, now + 1 h]`` and ``(now, now + 24 h]``, and those due at or before ``now``."""

    ladder: str
    ladder_version: int
    tier: str
    pending: int
    due_hour: int
    due_day: int
    overdue: int


@dataclass(frozen=True, slots=True)
class PendingFilter:
    """The pending list's filters. ``window``: ``hour`` | ``day`` | ``overdue`` | None;
    ``stage``: ``in_progress`` (pending, not yet due) | ``breached`` (pending, due at or
    before now) | ``paused`` | None (pending and paused); ``sort``: ``due`` (time to breach,
    soonest first; paused last) | ``elapsed`` (share of the tier's SLA window elapsed,
    largest first; paused last)."""

    ladder: str | None = None
    tier: str | None = None
    window: str | None = None
    stage: str | None = None
    sort: str = "due"

    WINDOWS: ClassVar[tuple[str, ...]] = ("hour", "day", "overdue")
    STAGES: ClassVar[tuple[str, ...]] = ("in_progress", "breached", "paused")
    SORTS: ClassVar[tuple[str, ...]] = ("due", "elapsed")

    def __post_init__(self) -> None:
        """Refuse an unknown window, stage or sort, and a ladder or tier name holding a
        control character (PostgreSQL text cannot hold NUL), naming the parameter
        (InvalidInput)."""
        for name, text in (("ladder", self.ladder), ("tier", self.tier)):
            if text is not None:
                check_text(text, name)
        for name, value, allowed in (("window", self.window, self.WINDOWS),
                                     ("stage", self.stage, self.STAGES),
                                     ("sort", self.sort, self.SORTS)):
            if value is not None and value not in allowed:
                raise InvalidInput(f"{name} must be {', '.join(allowed[:-1])} or "
                                   f"{allowed[-1]}, got {value!r}", field=name)


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


@dataclass(frozen=True, slots=True)
class ClockFilter:
    """Which clocks of ``escalation_clock`` a deadline list reads (a superset of what the
    obligations rule then keeps). ``since`` / ``until``: the instant in ``[since, until)``;
    ``ladder`` / ``name``: the ladder and deadline; ``state``: the outcome asked for
    (``met``, ``missed``, ``at_risk``, ``pending``, ``undetermined``, ``open_miss``, or
    None for any) and ``at_risk_s`` its span; ``after_end``: ``ladder@version:name`` of the
    deadlines the resolution does not meet (such a clock may stay open on an ended
    dispute); ``ended``: only clocks of ended (True) or of other (False) disputes."""

    since: datetime | None = None
    until: datetime | None = None
    ladder: str | None = None
    name: str | None = None
    state: str | None = None
    at_risk_s: float = 48 * 3600
    after_end: tuple[str, ...] = ()
    ended: bool | None = None


ClockKey = tuple[datetime, UUID, str]
"""A clock's keyset: (instant, dispute id, deadline name)."""


@dataclass(frozen=True, slots=True)
class DeadlineList:
    """One deadline list: the clocks ``flt`` selects, their outcomes at ``now`` (aware UTC;
    the same on every page of one list), in the order of ``sort`` (a key of
    ``service_layer.deadline_outcomes.SORT_KEYS``; ``deadline_at``: by instant, dispute id,
    name, the order the keyset pages walk in whatever ``sort`` says), ``descending``: the
    reverse."""

    flt: ClockFilter
    now: datetime
    sort: str = "deadline_at"
    descending: bool = False


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
