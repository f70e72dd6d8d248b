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

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar, cast
from uuid import UUID

from escalation.domain.calendars import CalendarRegistry
from escalation.domain.errors import (
    LadderError,
    LadderMigrationError,
    LadderNotReleased,
    LadderVersionSuperseded,
    UnknownPlanHash,
)
from escalation.domain.escalation import Escalation, Status
from escalation.domain.ladder import Ladder
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
    LadderDirectory,
    LadderFiles,
    LadderHistory,
    Page,
    Scheduler,
)
from escalation.service_layer.progress import Progress

PAGE = 5000
log = get_logger("escalation.ladders")
Hook = Callable[[str, int], None]
Replanned = tuple[PlanItem, datetime | None] | Blocked


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
                            if k[0] == name and k[1] <= to_version}, files.calendars)
    if errors:
        raise LadderMigrationError("ladder files fail `ladder check`:\n" + "\n".join(errors))
    return versions, versions[to_version]


def require_known_ladder(files: LadderFiles, released: Mapping[tuple[str, int], str],
                         name: str) -> None:
    """Raise :class:`LadderNotReleased` (exit 2) for a ladder name that no file (valid or
    not) and no release has, naming the ladders that exist (plan, apply, history)."""
    known = sorted({ld.name for ld in files.all()} | {k[0] for k in released})
    if name not in known and not any(f"{name}.v" in e for e in files.errors):
        raise LadderNotReleased(f"unknown ladder {name!r} (ladders: {', '.join(known) or 'none'})")


def _require_released(files: LadderFiles, released: Mapping[tuple[str, int], str],
                      name: str, version: int) -> None:
    """Raise :class:`LadderNotReleased` naming why ``name@version`` is not a released version
    (an unknown ladder is named as such, with the ladders that exist)."""
    if (name, version) in released:
        return
    require_known_ladder(files, released, name)
    target = files.find(name, version)
    if target is not None:
        chain = [ld for ld in files.all() if ld.name == name and ld.version <= version]
        problems = check_ladders(chain, {k: c for k, c in released.items() if k[0] == name},
                                 files.calendars)
        state = (f"is invalid ({' | '.join(problems)})" if problems else "is not released")
    else:
        bad = [e for e in files.errors if f"{name}.v{version}.toml" in e]
        state = f"is invalid ({' | '.join(bad)})" if bad else "has no file"
    raise LadderNotReleased(
        f"ladder {name!r} version {version} {state}; plan and apply only migrate to a "
        f"released version (`escalation ladder check`, then `escalation ladder release "
        f"--ladder {name} --version {version}`)")


def _files_of(versions: Mapping[int, Ladder]) -> tuple[tuple[int, str], ...]:
    return tuple((v, ld.checksum) for v, ld in sorted(versions.items()))


# --------------------------------------------------------------------------- plan
def _open_escalations(
    history: LadderHistory, name: str, below: int, page: int = PAGE
) -> Iterator[list[Escalation]]:
    """Keyset pages of the pending/paused escalations of ``name`` pinned below ``below``."""
    after: UUID | None = None
    while True:
        rows = history.open_escalations(name, after, page, below_version=below)
        if rows:
            yield rows
        if len(rows) < page:
            return
        after = rows[-1].dispute_id


def plan_migration(
    *,
    history: LadderHistory,
    ladders: LadderDirectory,
    calendars: CalendarRegistry,
    ladder: str,
    to_version: int,
    progress: Progress | None = None,
) -> MigrationPlan:
    """Dry run: plan every pending/paused escalation of ``ladder`` pinned below ``to_version``.

    Args:
        progress: a :class:`escalation.service_layer.progress.Progress`, called as
            ``progress("plan", planned so far, total)`` after each page of 5,000.

    Raises:
        LadderMigrationError: the target version is not released or invalid, a released
            file of the path is missing or edited, or the files fail ``ladder check``;
            :class:`LadderVersionSuperseded` when a later version is already applied.
    """
    versions, target = _change(history, ladders, ladder, to_version)
    total = history.count_open(ladder, to_version) if progress else 0
    done = 0

    def pages() -> Iterator[Escalation]:
        nonlocal done
        for page in _open_escalations(history, ladder, to_version):
            yield from page
            done += len(page)
            if progress:
                progress("plan", done, max(total, done))

    return build_plan(pages(), versions, target, calendars)


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


def apply_migration(
    *,
    history: LadderHistory,
    scheduler: Scheduler,
    ladders: LadderDirectory,
    calendars: CalendarRegistry,
    ladder: str,
    to_version: int,
    plan_hash: str,
    actor: str,
    reason: str = "",
    batch_size: int = 500,
    lock_wait_s: float = 30.0,
    progress: Progress | None = None,
    hook: Hook | None = None,
    on_scheduled: Callable[[Sequence[Escalation]], None] | None = None,
) -> ApplyReport:
    """Apply the migration of ``ladder`` to ``to_version`` that ``plan_hash`` names.

    Args:
        plan_hash: the hash ``ladder plan`` printed (it names the change, so it stays valid
            while workers decide escalations; a failed/crashed run with it is resumed).
        actor, reason: who applies and why (e.g. a change ticket): on the history row, on
            the run's LADDER_APPLIED / LADDER_APPLY_FAILED ledger row, and on every
            LADDER_MIGRATED ledger row (whose reason also names the release migrated to).
        batch_size: escalations per PostgreSQL transaction (1..5000).
        lock_wait_s: how long to retry members whose lock a worker holds (NOT_OWNER).
        progress: a :class:`escalation.service_layer.progress.Progress`, called as
            ``progress("migrate", done, total)`` after each batch.
        hook: test hook ``hook(stage, batch_index)`` at ``after_record`` / ``after_restore``.
        on_scheduled: called with each batch's migrated pending escalations after their
            Redis restore (the CLI schedules their pre-breach warnings still ahead).

    Returns:
        ApplyReport; ``already_applied`` is set (and nothing is written) when a finished run
        with this hash already migrated everything.

    Raises:
        UnknownPlanHash: ``plan_hash`` is not the hash of this change (mistyped, or the files
            changed since the plan: plan and review again).
        LadderMigrationError: the target is not released or invalid, or a released file of
            the path is missing or edited; :class:`LadderVersionSuperseded` when a later
            version is already applied.
        ConflictError: another apply of this ladder version is running.
    """
    if not 1 <= batch_size <= PAGE:
        raise LadderMigrationError(f"batch size must be 1-{PAGE}, got {batch_size}")
    versions, target = _change(history, ladders, ladder, to_version)
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
    report = _start(history, scheduler, ladder, target, plan_hash, actor, reason)
    change = _Target(ladder, versions, target, calendars, actor, {
        "migration_id": report.run_id, "checksum": target.checksum, "plan_hash": plan_hash,
        **_release_details(history, ladder, to_version, reason)})
    try:
        _run_batches(change, report, history=history, scheduler=scheduler,
                     batch_size=batch_size, progress=progress, hook=hook,
                     on_scheduled=on_scheduled)
        report.left_to_workers = _retry_not_owner(
            report.left_to_workers, history, scheduler, lock_wait_s)
    except BaseException as exc:
        history.finish(report.run_id, "failed", scheduler.time(), error=repr(exc)[:500])
        _log_run(ladder, to_version, "failed", report, target.checksum, plan_hash, actor)
        raise
    history.finish(report.run_id, "done", scheduler.time())
    _log_run(ladder, to_version, "done", report, target.checksum, plan_hash, actor)
    return report


def _log_run(ladder: str, version: int, status: str, report: ApplyReport, checksum: str,
             plan_hash: str, actor: str) -> None:
    """One INFO line per ended run, naming the ledger event its end appended (ADR 0012)."""
    log.info("ladder.apply_ended", ladder=ladder, version=version, run_id=report.run_id,
             status=status, migrated=report.migrated, plan_hash=plan_hash, actor=actor,
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


def _start(history: LadderHistory, scheduler: Scheduler, ladder: str, target: Ladder,
           plan_hash: str, actor: str, reason: str) -> ApplyReport:
    """Resume the unfinished run with this hash, or start a new one (superseding another)."""
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
    report.run_id = history.start(
        ladder=ladder, version=target.version, checksum=target.checksum, plan_hash=plan_hash,
        applied_by=actor, started_at=now, planned=planned, reason=reason)
    return report


@dataclass
class _Planned:
    """One page read and planned at apply time (by the read-ahead thread)."""

    page: Page
    items: list[PlanItem]
    blocked: list[Blocked]


@dataclass
class _Restoring:
    """The Redis restore of one committed batch, running on the restore thread."""

    index: int
    last: UUID
    migrated: list[Escalation]
    future: Future[list[UUID]]


@dataclass
class _Synced:
    """Redis resume point not yet recorded in ``ladder_history``: the last dispute id of the
    newest batch whose restore finished, and the NOT_OWNER count of those restores."""

    through: UUID | None = None
    not_owner: int = 0

    def take(self) -> tuple[UUID, int] | None:
        """The note to record (and forget it), or None when nothing new was restored."""
        if self.through is None:
            return None
        note = (self.through, self.not_owner)
        self.through, self.not_owner = None, 0
        return note


def _run_batches(
    change: _Target,
    report: ApplyReport,
    *,
    history: LadderHistory,
    scheduler: Scheduler,
    batch_size: int,
    progress: Progress | None,
    hook: Hook | None,
    on_scheduled: Callable[[Sequence[Escalation]], None] | None = None,
) -> None:
    """Plan and migrate page by page (dispute-id order) until nothing is pinned below.

    Three stages overlap (docs/performance.md, "Ladder migrations"): a read-ahead thread reads
    and plans page k+1 while this thread runs the PostgreSQL transaction of page k, and a
    restore thread restores batch k-1 into Redis meanwhile (at most one restore in flight:
    batch k-1's is waited for before batch k's starts). Each batch is still planned from a
    read older than its lock and re-validated under the lock (the seq guard), so reading
    ahead changes nothing there.

    The Redis resume point (``redis_synced_through``) only ever names a batch whose restore
    finished: it rides in the next transaction after that, and is recorded after the last
    batch -- or, best effort, when the apply fails (after the in-flight restore ended)."""
    done = 0
    synced = _Synced()
    restoring: _Restoring | None = None

    def finish(job: _Restoring) -> None:
        busy = job.future.result()
        if on_scheduled is not None:
            on_scheduled([s for s in job.migrated if s.status is Status.PENDING])
        report.not_owner += len(busy)
        report.left_to_workers = _retry_not_owner(
            [*report.left_to_workers, *busy], history, scheduler, 0.0)
        synced.through = job.last
        synced.not_owner += len(busy)
        if hook:
            hook("after_restore", job.index)

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="ladder-apply") as pool:
        try:
            for index, planned in enumerate(
                    _read_ahead(pool, _planned_pages(history, change, batch_size))):
                report.blocked.extend(planned.blocked)
                last = planned.page.escalations[-1].dispute_id
                if restoring is not None and restoring.future.done():
                    job, restoring = restoring, None
                    finish(job)
                migrated = _record(change, report, history, scheduler, planned.items,
                                   planned.page, (last, len(planned.blocked)), synced.take())
                if hook:
                    hook("after_record", index)
                if restoring is not None:
                    job, restoring = restoring, None
                    finish(job)
                restoring = _Restoring(index, last, migrated,
                                       pool.submit(_restore, scheduler, migrated))
                done += len(planned.page.escalations)
                if progress:
                    progress("migrate", done, max(report.planned, done))
            if restoring is not None:
                job, restoring = restoring, None
                finish(job)
        except BaseException:
            _settle(restoring, finish, synced, history, report.run_id)
            raise
    note = synced.take()
    if note is not None:
        history.note_redis(report.run_id, *note)


def _settle(restoring: _Restoring | None, finish: Callable[[_Restoring], None],
            synced: _Synced, history: LadderHistory, run_id: int) -> None:
    """On failure: wait for the in-flight restore and record how far Redis got (best
    effort: the caller re-raises the original error; resume is correct from an older
    point too, since restoring is idempotent)."""
    with contextlib.suppress(Exception):  # the apply's own error is the one to report
        if restoring is not None:
            finish(restoring)
    with contextlib.suppress(Exception):  # same: never mask the apply's own error
        note = synced.take()
        if note is not None:
            history.note_redis(run_id, *note)


_T = TypeVar("_T")


def _read_ahead(pool: ThreadPoolExecutor, items: Iterator[_T]) -> Iterator[_T]:
    """Yield ``items``, computing the next one on ``pool`` while the caller uses this one.

    ``items`` is only ever advanced by one thread at a time (one future in flight)."""
    end = object()
    ahead: Future[object] = pool.submit(next, items, end)
    while True:
        item = ahead.result()
        if item is end:
            return
        ahead = pool.submit(next, items, end)
        yield cast(_T, item)


def _planned_pages(history: LadderHistory, change: _Target, size: int) -> Iterator[_Planned]:
    """Each page of :func:`_pages`, planned at read time."""
    for page in _pages(history, change, size):
        items, blocked = split_plan(page.escalations, change.versions, change.target,
                                    change.calendars)
        yield _Planned(page, items, blocked)


def _pages(history: LadderHistory, change: _Target, size: int) -> Iterator[Page]:
    after: UUID | None = None
    while True:
        page = history.open_page(change.ladder, after, size,
                                 below_version=change.target.version)
        if page.escalations:
            yield page
        if len(page.escalations) < size:
            return
        after = page.escalations[-1].dispute_id


def _record(change: _Target, report: ApplyReport, history: LadderHistory,
            scheduler: Scheduler, items: Sequence[PlanItem], page: Page,
            through: tuple[UUID, int], note: tuple[UUID, int] | None) -> list[Escalation]:
    """One PostgreSQL transaction for one page's items; returns the migrated states."""
    now = scheduler.time()
    calendars = change.calendars

    def replan(esc: Escalation) -> Replanned:
        again = plan_escalation(esc, change.versions, change.target, calendars)
        if isinstance(again, Blocked):
            return again
        return again, again.due.resolve(now, calendars)

    result = history.migrate_batch(
        report.run_id, [(i, i.due.resolve(now, calendars)) for i in items],
        target_version=change.target.version, actor=change.actor, decided_at=now,
        details=change.details, replan=replan, through=through[0], blocked=through[1],
        page_rows=page.rows, redis_note=note,
        page_escalations={e.dispute_id: e for e in page.escalations},
    )
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
        page = history.open_escalations(ladder, after, PAGE, at_version=version, through=last)
        _restore(scheduler, page)
        repaired += len(page)
        if len(page) < PAGE:
            return repaired
        after = page[-1].dispute_id
