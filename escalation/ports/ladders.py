"""The ladder ports: released ladder versions, the files on disk, releases and migration runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol
from uuid import UUID

from escalation.domain.calendars import CalendarRegistry
from escalation.domain.escalation import Escalation
from escalation.domain.ladder import Ladder
from escalation.domain.ladder_check import RegulatoryFitCheck
from escalation.domain.ladder_ledger import ReleaseEvent
from escalation.domain.ladder_plan import Blocked, PlanItem


class LadderSource(Protocol):
    """Versioned ladders (adapter: ``adapters.ladder_files.LadderCatalog``)."""

    def get(self, name: str, version: int) -> Ladder:
        """One ladder version. Raises LadderError if unknown."""
        ...

    def latest(self, name: str) -> Ladder:
        """The highest version of ``name``. Raises LadderError if unknown."""
        ...

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


@dataclass(frozen=True, slots=True)
class MigrationBatch:
    """One batch of a ladder apply to write in one transaction (``LadderHistory.migrate_batch``).

    ``run_id``: the ``ladder_history`` run; its counters and resume point advance in the
    same transaction. ``items``: ``(planned item, resolved new due time)`` pairs.
    ``target_version``: the version migrated to. ``actor``: who applies (ledger ``actor``).
    ``decided_at``: aware UTC time of the migration (Redis TIME). ``details``: extra JSON for
    every ledger row (migration id, checksum, reason); no floats. ``through``: the resume
    point to record (the last dispute id of the page the batch came from; None: the batch's
    last id). ``blocked``: escalations of that page found blocked before the batch (counted).
    """

    run_id: int
    items: Sequence[tuple[PlanItem, datetime | None]]
    target_version: int
    actor: str
    decided_at: datetime
    details: Mapping[str, Any]
    through: UUID | None = None
    blocked: int = 0


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


@dataclass(frozen=True, slots=True)
class NewRelease:
    """A release to record (``LadderHistory.release``): ``ladder@version`` with the
    ``checksum`` of its file, who released it and why, and when (aware)."""

    ladder: str
    version: int
    checksum: str
    released_by: str
    reason: str
    released_at: datetime


@dataclass(frozen=True, slots=True)
class NewRun:
    """A ladder apply run to start (``LadderHistory.start``): ``ladder@version`` with the
    ``checksum`` of its file and the ``plan_hash`` it applies, who applies it, when (aware),
    how many escalations the plan moves (``planned``) and why."""

    ladder: str
    version: int
    checksum: str
    plan_hash: str
    applied_by: str
    started_at: datetime
    planned: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class OpenFilter:
    """Which open escalations of a ladder a page holds (``LadderHistory.open_escalations``):
    pinned below ``below_version`` and/or at ``at_version``, dispute ids <= ``through``
    (None: no bound)."""

    below_version: int | None = None
    at_version: int | None = None
    through: UUID | None = None


ALL_OPEN = OpenFilter()


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

    @property
    def fit_check(self) -> RegulatoryFitCheck | None:
        """How the files' regulatory fit is checked (the adapter's memo of the sweep); None
        = ``check_ladders``' own check, every time."""
        ...

    def find(self, name: str, version: int) -> Ladder | None:
        """The valid file of ``name@version``, or None."""
        ...

    def all(self) -> list[Ladder]:
        """Every valid file, by name then version."""
        ...

    def verify(self, name: str, version: int, checksum: str) -> Ladder:
        """The file of released ``name@version`` if present, valid and with ``checksum``.
        Raises LadderReleaseError (code ``RELEASE_BROKEN``) otherwise."""
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

    def release(self, rel: NewRelease) -> tuple[ReleaseRow, bool]:
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

    def start(self, run: NewRun) -> int:
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
        """Record how far the Redis side of the run has been restored (at the latest with
        the run's next write: its next batch or its finish; a resume from an older point
        restores again, which is idempotent)."""
        ...

    def open_escalations(self, ladder: str, after: UUID | None, limit: int,
                         flt: OpenFilter = ALL_OPEN) -> list[Escalation]:
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

    def migrate_batch(self, batch: MigrationBatch, replan: Replan) -> BatchResult:
        """Migrate one batch in one transaction (LADDER_MIGRATED rows, projection, counters,
        resume points); ``replan`` re-plans an item whose seq moved, from its locked state."""
        ...
