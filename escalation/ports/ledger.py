"""The ledger ports: recording decisions and events (``AuditLog``, ``EventLog``, the CSV import's
staged writes), the SLA report's reads and the audit search, with the values that cross them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from escalation.domain.decide import Decision
from escalation.domain.errors import InvalidParameter
from escalation.domain.escalation import Escalation, Status, check_text
from escalation.domain.record_rule import RecordStatus
from escalation.ports.scheduler import ClaimedItem


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
    source: str | None = None
    """The dispute's source system name (its projection's ``source``), where the query that
    read the row joins the projection (``unapplied_decisions``); else None."""


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


@dataclass(frozen=True, slots=True)
class LedgerEvent:
    """One ledger row to append with its projection change (``EventLog.append_event``).

    ``event``: one of the ledger's events (``tables.LEDGER_EVENTS``); ``match_decision``:
    the rule that decided it; ``actor``: who acts; ``decided_at``: aware instant;
    ``changes``: projection columns to set (``MUTABLE_STATE`` keys); ``details``: the JSON
    object stored and hashed with the row (no floats); ``expected_seq``: when given, the
    projection's last seq must equal it (compare-and-set); ``calendar_version``: the
    calendar data version the row's times were computed with, when it matters.
    """

    dispute_id: UUID
    event: str
    match_decision: str
    actor: str
    decided_at: datetime
    changes: Mapping[str, Any]
    details: Mapping[str, Any]
    expected_seq: int | None = None
    calendar_version: str | None = None


class EventLog(Protocol):
    """The audit-store methods of the non-firing use cases (pause/resume, warnings):
    read a dispute's state and trail, append one event under a seq compare-and-set."""

    def get(self, dispute_id: UUID) -> tuple[Escalation, Status] | None:
        """Projection state and status, or None."""
        ...

    def trail(self, dispute_id: UUID) -> list[LedgerRow]:
        """Ledger rows of one dispute, oldest first."""
        ...

    def append_event(self, entry: LedgerEvent) -> Escalation:
        """Append one ledger row + projection change (CAS on ``entry.expected_seq``).
        Raises ConflictError, or DuplicateEvent when a uniqueness rule of the ledger refuses
        the row."""
        ...


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
