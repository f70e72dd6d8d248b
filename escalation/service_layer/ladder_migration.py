"""Use cases: ``ladder check``, ``ladder plan``, ``ladder apply`` (docs/ladder-migrations.md;
Flyway-style, not Alembic revisions: docs/adr/0001-ladder-migrations-not-alembic.md).

* ``ladder check`` -- every ladder file, plus the checksums recorded at release and apply,
  and released files gone missing (``adapters.ladder_files.check_ladder_dir_with_history``).
* :func:`plan_migration` -- a dry run over the pending and paused escalations of one ladder
  in PostgreSQL (the system of record). Its plan hash names the *change* (ladder, versions,
  file checksums, planning rules: :func:`~escalation.domain.ladder_plan.change_hash`), not
  the escalations, so it stays valid while workers fire. No writes.
* :func:`apply_migration` -- checks that the hash names the change the files describe now
  (every version released and unchanged), then walks the escalations pinned below the target
  in dispute-id pages: each page is planned at apply time and migrated in ONE PostgreSQL
  transaction (rows locked, each seq compared with the one planned -- the same per-dispute
  seq guard the workers record under; a worker decision in between re-plans the escalation
  from its locked row), then restored into Redis (seq guarded). Resumable: a re-run with the
  same hash continues a failed or crashed run (the Redis side of committed batches is
  restored first).

Workers keep firing meanwhile. A worker that decided on the old version before the batch
committed wins the seq compare-and-set and the item is re-planned from its new state; one
that claimed before and records after gets STALE and applies the migrated state. A member
whose lock a worker holds at restore time (NOT_OWNER) is retried until the lock is gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol
from uuid import UUID

from escalation.domain.calendars import CalendarRegistry
from escalation.domain.errors import (
    EscalationError,
    LadderError,
    LadderMigrationError,
    LadderNotReleased,
    LadderVersionNotFound,
    LadderVersionSuperseded,
    UnknownPlanHash,
)
from escalation.domain.escalation import Escalation, Status
from escalation.domain.ladder import Ladder, unknown_ladder
from escalation.domain.ladder_check import check_ladders
from escalation.domain.ladder_ledger import run_event
from escalation.domain.ladder_plan import (
    Blocked,
    MigrationPlan,
    PlanItem,
    build_plan,
    change_hash,
    plan_escalation,
    split_plan,
)
from escalation.logs import get_logger
from escalation.ports import (
    ApplyOutcome,
    HistoryRow,
    LadderFiles,
    LadderHistory,
    LadderSource,
    MigrationBatch,
    NewRun,
    OpenFilter,
    Scheduler,
)
from escalation.service_layer.core import IN_ORDER, Pipeline
from escalation.service_layer.progress_report import Progress


class LadderVersions(LadderSource, Protocol):
    """A :class:`LadderSource` that can list a ladder's versions (adapter:
    ``adapters.ladder_files.LadderCatalog``)."""

    def versions(self, name: str) -> list[int]:
        """Versions of ladder ``name``, ascending (empty if unknown)."""
        ...


class LadderDirectory(LadderVersions, Protocol):
    """The ladders ``ladder plan``/``apply`` read (adapters: ``LadderCatalog``,
    ``ReleasedLadders``): :meth:`on_disk` re-reads the files as they are now."""

    def on_disk(self) -> LadderFiles:
        """The files of the directory as they are now (released or not)."""
        ...


PAGE = 5000
log = get_logger("escalation.ladders")
Hook = Callable[[str, int], None]
Replanned = tuple[PlanItem, datetime | None] | Blocked


@dataclass(frozen=True, slots=True)
class PlanMigration:
    """Plan the migration of ``ladder`` to version ``to_version`` (a released version number,
    1 or more). Refused (``LadderMigrationError``) when that version is not released or its
    file is invalid, a released file of the path is missing or edited, the files fail
    ``ladder check``, or a later version is already applied."""

    ladder: str
    to_version: int


@dataclass(frozen=True, slots=True)
class ApplyMigration:
    """Apply the migration of ``ladder`` to ``to_version`` that ``plan_hash`` names.

    ``plan_hash``: the hash ``ladder plan`` printed (it names the change, so it stays valid
    while workers decide escalations; a failed/crashed run with it is resumed). ``actor``,
    ``reason``: who applies and why (e.g. a change ticket): on the history row, on the run's
    LADDER_APPLIED / LADDER_APPLY_FAILED ledger row, and on every LADDER_MIGRATED ledger row
    (whose reason also names the release migrated to). ``batch_size``: escalations per
    PostgreSQL transaction, 1-5000 (else ``LadderMigrationError``). ``lock_wait_s``: seconds
    to retry members whose lock a worker holds (NOT_OWNER). An unknown hash is refused with
    ``UnknownPlanHash``.
    """

    ladder: str
    to_version: int
    plan_hash: str
    actor: str
    reason: str = ""
    batch_size: int = 500
    lock_wait_s: float = 30.0


@dataclass(frozen=True, slots=True)
class LadderPorts:
    """What planning and applying read and write: the migration runs and their batched
    writes (``history``), Redis (``scheduler``: restores, and TIME as the clock), the ladder
    files on disk (``ladders``), the calendars, and how a batch's PostgreSQL and Redis steps
    overlap (``pipeline``; the edge picks it: ``bootstrap.ladder_pipeline``)."""

    history: LadderHistory
    scheduler: Scheduler
    ladders: LadderDirectory
    calendars: CalendarRegistry
    pipeline: Pipeline = IN_ORDER


@dataclass(frozen=True, slots=True)
class ApplyHooks:
    """What a caller observes of an apply. ``progress``: called as ``progress("migrate",
    done, total)`` after each batch; ``hook``: test hook ``hook(stage, batch_index)`` at
    ``after_record`` / ``after_restore``; ``on_scheduled``: called with each batch's migrated
    pending escalations after their Redis restore (the CLI schedules their pre-breach
    warnings still ahead)."""

    progress: Progress | None = None
    hook: Hook | None = None
    on_scheduled: Callable[[Sequence[Escalation]], object] | None = None


NO_APPLY_HOOKS = ApplyHooks()


# --------------------------------------------------------------------------- the change
def _refuse_below_applied(history: LadderHistory, name: str, to_version: int) -> None:
    """Raise :class:`LadderVersionSuperseded` when a finished apply of ``name`` reached a
    version above ``to_version``: applying the lower one would move nothing (nothing is
    pinned below it any more) yet write a history run that reads like a rollback."""
    done = [r for r in history.history(name) if r.status == "done" and r.version > to_version]
    if done:
        top = max(done, key=lambda r: (r.version, r.run_id))
        when = top.finished_at.isoformat() if top.finished_at else top.started_at.isoformat()
        raise LadderVersionSuperseded(
            f"ladder {name!r} is already migrated to version {top.version} (run {top.run_id}, "
            f"{when}, by {top.applied_by}); a migration never moves escalations back to "
            f"version {to_version}: to undo a change, release a new version (v{top.version + 1}"
            " or later) that restores the earlier tiers, then plan and apply it")


def _change(
    history: LadderHistory, ladders: LadderDirectory, name: str, to_version: int
) -> tuple[dict[int, Ladder], Ladder]:
    """Every version ``1..to_version`` of ``name`` (by number) and the target, validated.

    Raises:
        LadderVersionNotFound: the target has neither a file nor a release (exit 3).
        LadderMigrationError: the target is not released or its file is invalid; a version
            of the path is released but its file is missing or edited; the files fail
            ``ladder check``.
    """
    files = ladders.on_disk()
    released = history.released_checksums()
    _require_released(files, released, name, to_version)
    _refuse_below_applied(history, name, to_version)
    versions: dict[int, Ladder] = {}
    for v in range(1, to_version + 1):
        checksum = released.get((name, v))
        if checksum is None:
            raise LadderNotReleased(f"ladder {name!r} version {v} is not released")
        try:
            versions[v] = files.verify(name, v, checksum)
        except LadderError as exc:
            raise LadderNotReleased(f"ladder {name!r} version {v} is invalid: {exc}") from None
    # the path v1..target against the checksums released for it: a later version released
    # since (v3 while planning to v2) is not part of this change
    errors = check_ladders(list(versions.values()),
                           {k: c for k, c in released.items()
                            if k[0] == name and k[1] <= to_version}, files.calendars,
                           fit_check=files.fit_check)
    if errors:
        raise LadderMigrationError("ladder files fail `ladder check`:\n" + "\n".join(errors))
    return versions, versions[to_version]


def require_known_ladder(files: LadderFiles, released: Mapping[tuple[str, int], str],
                         name: str) -> None:
    """Raise :class:`~escalation.domain.errors.LadderNotFound` (exit 3, code ``NOT_FOUND``)
    for a ladder name that no file (valid or not) and no release has, naming the ladders
    that exist (plan, apply, history); a malformed name is a LadderError (exit 2,
    :func:`~escalation.domain.ladder.unknown_ladder`)."""
    known = sorted({ld.name for ld in files.all()} | {k[0] for k in released})
    if name not in known and not any(f"{name}.v" in e for e in files.errors):
        raise unknown_ladder(name, known)


def _require_released(files: LadderFiles, released: Mapping[tuple[str, int], str],
                      name: str, version: int) -> None:
    """Raise :class:`LadderNotReleased` naming why ``name@version`` is not a released version
    (an unknown ladder is named as such, with the ladders that exist), or
    :class:`LadderVersionNotFound` (exit 3) when the version has neither a file nor a
    release."""
    if (name, version) in released:
        return
    require_known_ladder(files, released, name)
    state, error = _why_unreleased(files, released, name, version)
    raise error(
        f"ladder {name!r} version {version} {state}; plan and apply only migrate to a "
        f"released version (`escalation ladder check`, then `escalation ladder release "
        f"--ladder {name} --version {version}`)")


def _why_unreleased(files: LadderFiles, released: Mapping[tuple[str, int], str],
                    name: str, version: int) -> tuple[str, type[EscalationError]]:
    """Why ``name@version`` (a known ladder) is not released, and the error that says it:
    its file is invalid or not released yet (:class:`LadderNotReleased`), or there is no
    file at all (:class:`LadderVersionNotFound`)."""
    target = files.find(name, version)
    if target is not None:
        chain = [ld for ld in files.all() if ld.name == name and ld.version <= version]
        problems = check_ladders(chain, {k: c for k, c in released.items() if k[0] == name},
                                 files.calendars, fit_check=files.fit_check)
        return (f"is invalid ({' | '.join(problems)})" if problems else "is not released",
                LadderNotReleased)
    bad = [e for e in files.errors if f"{name}.v{version}.toml" in e]
    if bad:
        return f"is invalid ({' | '.join(bad)})", LadderNotReleased
    return "has no file", LadderVersionNotFound


def _files_of(versions: Mapping[int, Ladder]) -> tuple[tuple[int, str], ...]:
    return tuple((v, ld.checksum) for v, ld in sorted(versions.items()))


# --------------------------------------------------------------------------- plan
def _open_escalations(
    history: LadderHistory, name: str, below: int, page: int = PAGE
) -> Iterator[list[Escalation]]:
    """Keyset pages of the pending/paused escalations of ``name`` pinned below ``below``."""
    after: UUID | None = None
    while True:
        rows = history.open_escalations(name, after, page, OpenFilter(below_version=below))
        if rows:
            yield rows
        if len(rows) < page:
            return
        after = rows[-1].dispute_id


def plan_migration(cmd: PlanMigration, ports: LadderPorts,
                   progress: Progress | None = None) -> MigrationPlan:
    """Dry run: plan every pending/paused escalation of ``cmd.ladder`` pinned below
    ``cmd.to_version``. Reads ``ports.history``, ``ports.ladders`` and ``ports.calendars``.

    Args:
        progress: a :class:`escalation.service_layer.progress_report.Progress`, called as
            ``progress("plan", planned so far, total)`` after each page of 5,000.

    Raises:
        LadderMigrationError: the target version is not released or invalid, a released
            file of the path is missing or edited, or the files fail ``ladder check``;
            :class:`LadderVersionSuperseded` when a later version is already applied.
    """
    history, ladder, to_version = ports.history, cmd.ladder, cmd.to_version
    versions, target = _change(history, ports.ladders, ladder, to_version)
    total = history.count_open(ladder, to_version) if progress else 0
    done = 0

    def pages() -> Iterator[Escalation]:
        nonlocal done
        for page in _open_escalations(history, ladder, to_version):
            yield from page
            done += len(page)
            if progress:
                progress("plan", done, max(total, done))

    return build_plan(pages(), versions, target, ports.calendars)


# --------------------------------------------------------------------------- apply
@dataclass
class ApplyReport:
    """What :func:`apply_migration` did (counts are for this invocation).

    ``planned``: escalations pinned below the target when the apply started; ``migrated``;
    ``replanned``: decided by a worker between their page's read and their batch's lock,
    re-planned from the locked row; ``unchanged``: closed, or already migrated, by the time
    their batch locked them; ``blocked``: cannot be migrated (left on their pinned version).
    """

    run_id: int = 0
    resumed: bool = False
    planned: int = 0
    migrated: int = 0
    replanned: int = 0
    unchanged: int = 0
    suppressed: int = 0
    blocked: list[Blocked] = field(default_factory=list)
    not_owner: int = 0
    left_to_workers: list[UUID] = field(default_factory=list)
    redis_repaired: int = 0
    already_applied: HistoryRow | None = None
    """Set (and nothing done) when a finished run already applied this plan hash."""

    @property
    def skipped(self) -> int:
        """Former name of :attr:`unchanged`."""
        return self.unchanged

    def already_applied_message(self) -> str:
        """``version N of LADDER is already applied (on DATE by ACTOR); nothing to do`` (DATE
        = the run's finish time, ISO 8601 UTC); empty when not already applied."""
        run = self.already_applied
        if run is None:
            return ""
        when = (run.finished_at or run.started_at).isoformat()
        return (f"version {run.version} of {run.ladder} is already applied (on {when} by "
                f"{run.applied_by}); nothing to do")

    def summary(self) -> str:
        """One line: ``planned N, migrated N, re-planned N, unchanged N, blocked N, ...``."""
        return (f"planned {self.planned}, migrated {self.migrated}, re-planned "
                f"{self.replanned}, unchanged {self.unchanged}, blocked {len(self.blocked)}, "
                f"breach suppressed {self.suppressed}, not owner {self.not_owner}, left to "
                f"workers {len(self.left_to_workers)}, redis repaired {self.redis_repaired}")


@dataclass(frozen=True)
class _Target:
    """Everything the batches need about the change and who applies it."""

    ladder: str
    versions: dict[int, Ladder]
    target: Ladder
    calendars: CalendarRegistry
    actor: str
    details: dict[str, object]


def apply_migration(cmd: ApplyMigration, ports: LadderPorts,
                    hooks: ApplyHooks = NO_APPLY_HOOKS) -> ApplyReport:
    """Apply the migration ``cmd`` names (:class:`ApplyMigration`): check that the hash names
    the change the files describe now, then plan and migrate page by page, each batch in one
    PostgreSQL transaction, then restored into Redis (``ports.pipeline`` decides whether
    those steps overlap).

    Returns:
        ApplyReport; ``already_applied`` is set (and nothing is written) when a finished run
        with this hash already migrated everything.

    Raises:
        UnknownPlanHash: ``plan_hash`` is not the hash of this change (mistyped, or the files
            changed since the plan: plan and review again).
        LadderVersionNotFound: the target has neither a file nor a release (exit 3).
        LadderMigrationError: the target is not released or invalid, or a released file of
            the path is missing or edited; :class:`LadderVersionSuperseded` when a later
            version is already applied.
        ConflictError: another apply of this ladder version is running.
    """
    history, scheduler, ladder, to_version = ports.history, ports.scheduler, cmd.ladder, \
        cmd.to_version
    plan_hash, actor, reason, batch_size = cmd.plan_hash, cmd.actor, cmd.reason, cmd.batch_size
    if not 1 <= batch_size <= PAGE:
        raise LadderMigrationError(f"batch size must be 1-{PAGE}, got {batch_size}")
    versions, target = _change(history, ports.ladders, ladder, to_version)
    expected = change_hash(ladder, to_version, _files_of(versions))
    if plan_hash != expected:
        # the given hash in full (a typo after its 16th digit shows); the expected one is
        # not printed: it is what `ladder plan` gives after a review, not a value to copy
        shown = plan_hash if len(plan_hash) <= 80 else plan_hash[:80] + "..."
        raise UnknownPlanHash(
            f"unknown plan hash {shown!r}: it is not the hash of the migration of "
            f"{ladder} to v{to_version} with the files as they are now; run `escalation "
            f"ladder plan --ladder {ladder} --to {to_version}`, review it, and apply with "
            f"the hash it prints")
    done = _finished_run(history, ladder, to_version, plan_hash)
    if done is not None:
        return ApplyReport(run_id=done.run_id, planned=done.planned, already_applied=done)
    report = _start(ports, cmd, target)
    change = _Target(ladder, versions, target, ports.calendars, actor, {
        "migration_id": report.run_id, "checksum": target.checksum, "plan_hash": plan_hash,
        **_release_details(history, ladder, to_version, reason)})
    try:
        _run_batches(change, report, ports, batch_size, hooks)
        report.left_to_workers = _retry_not_owner(
            report.left_to_workers, history, scheduler, cmd.lock_wait_s)
    except BaseException as exc:
        history.finish(report.run_id, "failed", scheduler.time(), error=repr(exc)[:500])
        _log_run(cmd, "failed", report, target.checksum)
        raise
    history.finish(report.run_id, "done", scheduler.time())
    _log_run(cmd, "done", report, target.checksum)
    return report


def _log_run(cmd: ApplyMigration, status: str, report: ApplyReport, checksum: str) -> None:
    """One INFO line per ended run, naming the ledger event its end appended (ADR 0012)."""
    log.info("ladder.apply_ended", ladder=cmd.ladder, version=cmd.to_version,
             run_id=report.run_id, status=status, migrated=report.migrated,
             plan_hash=cmd.plan_hash, actor=cmd.actor,
             trace_id="", source_hash=checksum, match_decision=run_event(status).value)


def _release_details(history: LadderHistory, ladder: str, version: int,
                     reason: str) -> dict[str, object]:
    """``reason`` and ``release`` of every LADDER_MIGRATED row of an apply: the apply's
    reason followed by the release migrated to (version, event, where on the ledger), so
    one dispute's trail names the release event (ADR 0012). A release recorded before
    ladder events were ledger rows is named by version, who and when."""
    row = history.releases(ladder).get((ladder, version))
    if row is None or row.ledger is None:
        release = (f"migrated to {ladder}@{version}" if row is None else
                   f"migrated to {ladder}@{version}, released by {row.released_by} on "
                   f"{row.released_at.isoformat()} (not on the ledger)")
        return {"reason": f"{reason}; {release}" if reason else release,
                "release": {"version": version}}
    return {"reason": row.ledger.migration_reason(reason), "release": row.ledger.as_details()}


def _finished_run(history: LadderHistory, ladder: str, version: int,
                  plan_hash: str) -> HistoryRow | None:
    """The latest run of ``ladder@version`` if it is ``done`` with ``plan_hash`` and left
    nothing behind (no escalation is pinned below ``version`` any more)."""
    runs = [r for r in history.history(ladder) if r.version == version]
    if not runs or runs[-1].status != "done" or runs[-1].plan_hash != plan_hash:
        return None
    return runs[-1] if history.count_open(ladder, version) == 0 else None


def _start(ports: LadderPorts, cmd: ApplyMigration, target: Ladder) -> ApplyReport:
    """Resume the unfinished run with this hash, or start a new one (superseding another)."""
    history, scheduler, ladder = ports.history, ports.scheduler, cmd.ladder
    plan_hash, actor, reason = cmd.plan_hash, cmd.actor, cmd.reason
    planned = history.count_open(ladder, target.version)
    report = ApplyReport(planned=planned)
    run = history.open_run(ladder, target.version)
    if run is not None and run.plan_hash == plan_hash:
        report.resumed, report.run_id = True, run.run_id
        if run.status == "failed":
            history.resume(run.run_id, actor, reason)
        report.redis_repaired = _repair_redis(history, scheduler, ladder, target.version, run)
        return report
    now = scheduler.time()
    if run is not None:
        history.finish(run.run_id, "failed", now, error="superseded by a new plan")
    report.run_id = history.start(NewRun(ladder=ladder, version=target.version,
                                         checksum=target.checksum, plan_hash=plan_hash,
                                         applied_by=actor, started_at=now, planned=planned,
                                         reason=reason))
    return report


@dataclass
class _Planned:
    """One page read and planned at apply time."""

    escalations: list[Escalation]
    items: list[PlanItem]
    blocked: list[Blocked]
    index: int = 0


@dataclass
class _Recorded:
    """One page's batch, committed in PostgreSQL: what the Redis restore writes."""

    index: int
    last: UUID
    migrated: list[Escalation]
    size: int


def _run_batches(change: _Target, report: ApplyReport, ports: LadderPorts, batch_size: int,
                 hooks: ApplyHooks) -> None:
    """Plan and migrate page by page (dispute-id order) until nothing is pinned below.

    Per page: read it and plan it, record it (one PostgreSQL transaction, each row
    re-validated under its lock: the seq guard), restore its migrated escalations into
    Redis, then note how far Redis got (``LadderHistory.note_redis``, the resume point; it
    only ever names a batch whose restore finished). ``ports.pipeline`` runs these steps;
    the overlapped one reads the next page and restores the previous batch while a batch
    is recorded (docs/performance.md, "Ladder migrations"), which changes nothing for the
    seq guard: each batch is planned from a read older than its lock either way."""
    history, scheduler = ports.history, ports.scheduler
    done = 0

    def record(planned: _Planned) -> _Recorded:
        report.blocked.extend(planned.blocked)
        last = planned.escalations[-1].dispute_id
        migrated = _record(change, report, ports, planned, (last, len(planned.blocked)))
        if hooks.hook:
            hooks.hook("after_record", planned.index)
        return _Recorded(planned.index, last, migrated, len(planned.escalations))

    def restore(batch: _Recorded) -> list[UUID]:
        return _restore(scheduler, batch.migrated)

    def restored(batch: _Recorded, busy: list[UUID]) -> None:
        if hooks.on_scheduled is not None:
            hooks.on_scheduled([s for s in batch.migrated if s.status is Status.PENDING])
        report.not_owner += len(busy)
        report.left_to_workers = _retry_not_owner(
            [*report.left_to_workers, *busy], history, scheduler, 0.0)
        history.note_redis(report.run_id, batch.last, len(busy))
        if hooks.hook:
            hooks.hook("after_restore", batch.index)

    pages = _planned_pages(history, change, batch_size)
    for batch in ports.pipeline.run(pages, record, restore, restored):
        done += batch.size
        if hooks.progress:
            hooks.progress("migrate", done, max(report.planned, done))


def _planned_pages(history: LadderHistory, change: _Target, size: int) -> Iterator[_Planned]:
    """Each keyset page of the escalations still pinned below the target, planned at read
    time."""
    after: UUID | None = None
    index = 0
    while True:
        page = history.open_page(change.ladder, after, size,
                                 below_version=change.target.version).escalations
        if page:
            items, blocked = split_plan(page, change.versions, change.target,
                                        change.calendars)
            yield _Planned(page, items, blocked, index)
            index += 1
        if len(page) < size:
            return
        after = page[-1].dispute_id


def _record(change: _Target, report: ApplyReport, ports: LadderPorts, planned: _Planned,
            through: tuple[UUID, int]) -> list[Escalation]:
    """One PostgreSQL transaction for one page's items; returns the migrated states."""
    now = ports.scheduler.time()
    calendars = change.calendars

    def replan(esc: Escalation) -> Replanned:
        again = plan_escalation(esc, change.versions, change.target, calendars)
        if isinstance(again, Blocked):
            return again
        return again, again.due.resolve(now, calendars)

    result = ports.history.migrate_batch(MigrationBatch(
        run_id=report.run_id, items=[(i, i.due.resolve(now, calendars)) for i in planned.items],
        target_version=change.target.version, actor=change.actor, decided_at=now,
        details=change.details, through=through[0], blocked=through[1]), replan)
    report.migrated += len(result.migrated)
    report.replanned += result.replanned
    report.unchanged += result.skipped
    report.suppressed += result.suppressed
    report.blocked.extend(result.blocked)
    return result.migrated


def _restore(scheduler: Scheduler, states: Sequence[Escalation]) -> list[UUID]:
    """Restore ``states`` into Redis; returns the ids a worker's lock kept (NOT_OWNER)."""
    if not states:
        return []
    outcomes = scheduler.restore(states)
    return [s.dispute_id for s, o in zip(states, outcomes, strict=True)
            if o is ApplyOutcome.NOT_OWNER]


def _retry_not_owner(
    ids: list[UUID], history: LadderHistory, scheduler: Scheduler, wait_s: float
) -> list[UUID]:
    """Re-restore members a worker held, from fresh PostgreSQL state, until ``wait_s`` ends.

    A worker holding the lock either records after the migration (STALE: it applies the
    migrated state itself) or recorded before it and applies its own older state; either way
    the lock is released within the lease, and this restore then brings Redis to PostgreSQL.
    Returns the ids still held when the time is up (their own worker or reconcile fixes them).
    """
    deadline = time.monotonic() + wait_s
    while ids:
        states = list(history.states(ids).values())
        ids = _restore(scheduler, states)
        if not ids or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    return ids


def _repair_redis(
    history: LadderHistory, scheduler: Scheduler, ladder: str, version: int,
    run: HistoryRow,
) -> int:
    """Resume: restore the batches PostgreSQL committed but Redis may not have seen."""
    last = run.last_dispute_id
    if last is None:
        return 0
    after = run.redis_synced_through
    repaired = 0
    while True:
        page = history.open_escalations(ladder, after, PAGE,
                                        OpenFilter(at_version=version, through=last))
        _restore(scheduler, page)
        repaired += len(page)
        if len(page) < PAGE:
            return repaired
        after = page[-1].dispute_id
