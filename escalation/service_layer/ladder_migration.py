"""Use cases: ``ladder check``, ``ladder plan``, ``ladder apply`` (issue 3; DESIGN.md "Ladders
and ladder migrations"; tech.md 3.10 -- Flyway-style, not Alembic revisions).

* ``ladder check`` -- every ladder file, plus the checksums recorded in ``ladder_history``
  (``adapters.ladder_files.check_ladder_dir_with_history``).
* :func:`plan_migration` -- a dry run over the pending and paused escalations of one ladder
  in PostgreSQL (the system of record), with a plan hash. No writes.
* :func:`apply_migration` -- re-plans and refuses if the hash differs; then, per batch, one
  PostgreSQL transaction (LADDER_MIGRATED rows, projection, history counters) followed by a
  seq-guarded ``Scheduler.restore`` of the batch. Resumable: a re-run with the same hash
  continues a failed or crashed run (escalations already on the target version are no
  longer in the plan; the Redis side of the last committed batch is restored first).

Workers keep firing meanwhile. A worker that decided on the old version before the batch
committed wins the seq compare-and-set and the item is re-planned from its new state; one
that claimed before and records after gets STALE and applies the migrated state. A member
whose lock a worker holds at restore time (NOT_OWNER) is retried until the lock is gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from escalation.domain.calendars import CalendarRegistry
from escalation.domain.errors import LadderMigrationError
from escalation.domain.escalation import Escalation, Status
from escalation.domain.ladder import Ladder
from escalation.domain.ladder_check import check_ladders
from escalation.domain.ladder_plan import (
    Blocked,
    MigrationPlan,
    PlanItem,
    build_plan,
    plan_escalation,
)
from escalation.ports import (
    ApplyOutcome,
    HistoryRow,
    LadderHistory,
    LadderVersions,
    Scheduler,
)
from escalation.service_layer.progress import Progress as ProgressFn

PAGE = 5000
Progress = Callable[[int, int], None]
PlanProgress = ProgressFn
Hook = Callable[[str, int], None]
Replanned = tuple[PlanItem, datetime | None] | Blocked


# --------------------------------------------------------------------------- plan
def _versions(
    ladders: LadderVersions, name: str, to_version: int
) -> tuple[dict[int, Ladder], Ladder]:
    target = ladders.get(name, to_version)
    versions = {v: ladders.get(name, v) for v in ladders.versions(name)}
    return versions, target


def _validate(versions: dict[int, Ladder], history: LadderHistory) -> None:
    applied = {k: v for k, v in history.applied_checksums().items() if k[0] in
               {ld.name for ld in versions.values()}}
    errors = check_ladders(list(versions.values()), applied)
    if errors:
        raise LadderMigrationError("ladder files fail `ladder check`:\n" + "\n".join(errors))


def _open_escalations(
    history: LadderHistory, name: str, below: int
) -> Iterator[Escalation]:
    after: UUID | None = None
    while True:
        page = history.open_escalations(name, after, PAGE, below_version=below)
        yield from page
        if len(page) < PAGE:
            return
        after = page[-1].dispute_id


def plan_migration(
    *,
    history: LadderHistory,
    ladders: LadderVersions,
    calendars: CalendarRegistry,
    ladder: str,
    to_version: int,
    progress: PlanProgress | None = None,
) -> MigrationPlan:
    """Dry run: plan every pending/paused escalation of ``ladder`` pinned below ``to_version``.

    ``progress`` (optional, :class:`escalation.service_layer.progress.Progress`) is called as
    ``progress("plan", read, None)`` after each page of escalations read.

    Raises:
        LadderError: no such ladder version.
        LadderMigrationError: the ladder's files fail ``ladder check`` (contiguity, maps,
            demoting maps, changed checksums).
    """
    versions, target = _versions(ladders, ladder, to_version)
    _validate(versions, history)
    rows = _open_escalations(history, ladder, to_version)
    if progress is not None:
        rows = _counted(rows, progress)
    return build_plan(rows, versions, target, calendars)


def _counted(rows: Iterator[Escalation], progress: PlanProgress) -> Iterator[Escalation]:
    """``rows`` unchanged, reporting ``progress("plan", n, None)`` every :data:`PAGE` rows."""
    n = 0
    for n, row in enumerate(rows, start=1):
        if n % PAGE == 0:
            progress("plan", n, None)
        yield row
    progress("plan", n, n)


# --------------------------------------------------------------------------- apply
@dataclass
class ApplyReport:
    """What :func:`apply_migration` did (counts are for this invocation)."""

    run_id: int = 0
    resumed: bool = False
    planned: int = 0
    migrated: int = 0
    replanned: int = 0
    skipped: int = 0
    suppressed: int = 0
    blocked: list[Blocked] = field(default_factory=list)
    not_owner: int = 0
    left_to_workers: list[UUID] = field(default_factory=list)
    redis_repaired: int = 0
    already_applied: HistoryRow | None = None
    """Set (and nothing done) when a finished run already applied this plan hash."""

    def already_applied_message(self) -> str:
        """``version N of LADDER is already applied (on DATE by ACTOR); nothing to do`` (DATE
        = the run's finish time, ISO 8601 UTC); empty when not already applied."""
        run = self.already_applied
        if run is None:
            return ""
        when = (run.finished_at or run.started_at).isoformat()
        return (f"version {run.version} of {run.ladder} is already applied (on {when} by "
                f"{run.applied_by}); nothing to do")


def apply_migration(
    *,
    history: LadderHistory,
    scheduler: Scheduler,
    ladders: LadderVersions,
    calendars: CalendarRegistry,
    ladder: str,
    to_version: int,
    plan_hash: str,
    actor: str,
    batch_size: int = 500,
    lock_wait_s: float = 30.0,
    progress: Progress | None = None,
    hook: Hook | None = None,
    on_scheduled: Callable[[Sequence[Escalation]], None] | None = None,
) -> ApplyReport:
    """Apply the migration of ``ladder`` to ``to_version`` that ``plan_hash`` approved.

    Args:
        plan_hash: the hash ``ladder plan`` printed; a failed/crashed run with the same hash
            is resumed even though the remaining plan differs.
        batch_size: escalations per PostgreSQL transaction (1..5000).
        lock_wait_s: how long to retry members whose lock a worker holds (NOT_OWNER).
        progress: ``progress(done, total)`` after each batch.
        hook: test hook ``hook(stage, batch_index)`` at ``after_record`` / ``after_restore``.
        on_scheduled: called with each batch's migrated pending escalations after their
            Redis restore (the CLI schedules their pre-breach warnings still ahead).

    Returns:
        ApplyReport; ``already_applied`` is set (and nothing is written) when a finished run
        of ``ladder@to_version`` with the same checksum already applied ``plan_hash``: a
        re-run of a completed apply is a no-op, not a drift.

    Raises:
        LadderMigrationError: the re-computed plan hash differs (state drifted), the plan has
            escalations that cannot be migrated, or the files fail ``ladder check``.
        ConflictError: another apply of this ladder version is running.
    """
    if not 1 <= batch_size <= PAGE:
        raise LadderMigrationError(f"batch size must be 1-{PAGE}, got {batch_size}")
    versions, target = _versions(ladders, ladder, to_version)
    done = _finished_run(history, ladder, to_version, plan_hash, target.checksum)
    if done is not None:
        return ApplyReport(run_id=done.run_id, planned=done.planned, already_applied=done)
    plan = plan_migration(history=history, ladders=ladders, calendars=calendars,
                          ladder=ladder, to_version=to_version)
    report = ApplyReport(planned=len(plan.items))
    run = history.open_run(ladder, to_version)
    resuming = run is not None and run.plan_hash == plan_hash and run.checksum == target.checksum
    if not resuming and plan.plan_hash != plan_hash:
        raise LadderMigrationError(
            f"plan hash differs: approved {plan_hash[:16]}..., the state now gives "
            f"{plan.plan_hash[:16]}... (escalations changed since the plan); run "
            f"`escalation ladder plan --to {to_version}` again and review it"
        )
    if plan.blocked:
        raise LadderMigrationError(
            f"{len(plan.blocked)} escalation(s) cannot be migrated to {target.key} (first: "
            f"{plan.blocked[0].dispute_id}: {plan.blocked[0].reason}); nothing applied"
        )
    now = scheduler.time()
    if resuming and run is not None:
        report.resumed, report.run_id = True, run.run_id
        if run.status == "failed":
            history.resume(run.run_id, actor)
        report.redis_repaired = _repair_redis(history, scheduler, ladder, to_version, run)
    else:
        if run is not None:
            history.finish(run.run_id, "failed", now, error="superseded by a new plan")
        report.run_id = history.start(
            ladder=ladder, version=to_version, checksum=target.checksum, plan_hash=plan_hash,
            applied_by=actor, started_at=now, planned=len(plan.items),
        )
    try:
        _run_batches(plan, report, history=history, scheduler=scheduler, versions=versions,
                     target=target, calendars=calendars, actor=actor, batch_size=batch_size,
                     progress=progress, hook=hook, on_scheduled=on_scheduled)
        report.left_to_workers = _retry_not_owner(
            report.left_to_workers, history, scheduler, lock_wait_s
        )
    except BaseException as exc:
        history.finish(report.run_id, "failed", scheduler.time(), error=repr(exc)[:500])
        raise
    history.finish(report.run_id, "done", scheduler.time())
    return report


def _finished_run(history: LadderHistory, ladder: str, version: int, plan_hash: str,
                  checksum: str) -> HistoryRow | None:
    """The latest ``done`` run of ``ladder@version`` that applied ``plan_hash`` with
    ``checksum``, if it is the latest run of that version (a later unfinished run wins)."""
    runs = [r for r in history.history(ladder) if r.version == version]
    if not runs:
        return None
    last = runs[-1]
    if last.status == "done" and last.plan_hash == plan_hash and last.checksum == checksum:
        return last
    return None


def _run_batches(
    plan: MigrationPlan,
    report: ApplyReport,
    *,
    history: LadderHistory,
    scheduler: Scheduler,
    versions: dict[int, Ladder],
    target: Ladder,
    calendars: CalendarRegistry,
    actor: str,
    batch_size: int,
    progress: Progress | None,
    hook: Hook | None,
    on_scheduled: Callable[[Sequence[Escalation]], None] | None = None,
) -> None:
    details = {"migration_id": report.run_id, "checksum": target.checksum,
               "plan_hash": plan.plan_hash}
    total = len(plan.items)
    for index, start in enumerate(range(0, total, batch_size)):
        chunk = plan.items[start : start + batch_size]
        now = scheduler.time()

        def replan(esc: Escalation, now: datetime = now) -> Replanned:
            again = plan_escalation(esc, versions, target, calendars)
            if isinstance(again, Blocked):
                return again
            return again, again.due.resolve(now, calendars)

        result = history.migrate_batch(
            report.run_id, [(i, i.due.resolve(now, calendars)) for i in chunk],
            target_version=target.version, actor=actor, decided_at=now, details=details,
            replan=replan,
        )
        report.migrated += len(result.migrated)
        report.replanned += result.replanned
        report.skipped += result.skipped
        report.suppressed += result.suppressed
        report.blocked.extend(result.blocked)
        if hook:
            hook("after_record", index)
        busy = _restore(scheduler, result.migrated)
        if on_scheduled is not None:
            on_scheduled([s for s in result.migrated if s.status is Status.PENDING])
        report.not_owner += len(busy)
        report.left_to_workers = _retry_not_owner(
            [*report.left_to_workers, *busy], history, scheduler, 0.0
        )
        history.note_redis(report.run_id, chunk[-1].dispute_id, len(busy))
        if hook:
            hook("after_restore", index)
        if progress:
            progress(min(start + batch_size, total), total)


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
        page = history.open_escalations(ladder, after, PAGE, at_version=version, through=last)
        _restore(scheduler, page)
        repaired += len(page)
        if len(page) < PAGE:
            return repaired
        after = page[-1].dispute_id
