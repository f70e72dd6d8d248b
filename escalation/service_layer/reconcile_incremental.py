"""Use case: incremental reconcile -- what changed since the last run, plus a slow sweep.

A full :func:`~escalation.service_layer.reconcile.reconcile` pages every pending escalation
(about 1,000 a second: a day per run at 100M pending). An incremental run reads instead:

1. **the ledger since its watermark**: the disputes with a ledger row recorded (``recorded_at``,
   the database's clock) in ``[watermark - overlap, horizon)``. The *horizon* is the
   database's ``clock_timestamp()`` or the start of its oldest open transaction, whichever is
   earlier, so a row committed after this run read the ledger always has ``recorded_at`` at or
   above the next run's lower bound (no commit is skipped however long its transaction ran).
   Each changed dispute gets every check a full run makes: its projection against its ledger
   (pass 0), its Redis payload / member / lock against the projection (MISSING, BEHIND,
   MISSING_MEMBER, AHEAD with the reset or the resync mark, LOCKED) and, when it is no longer
   pending, its ZSET member (TERMINAL_MEMBER, PAUSED_MEMBER, UNKNOWN_MEMBER).
2. **a slice of the sweep** (``domain.reconcile_sweep``): a cursor over the dispute id space
   (128-bit, ids ascending) that advances by ``elapsed / sweep period`` of the space per run
   (at most 15 minutes' worth), wrapping to the first id at the end: the pending and paused
   escalations in the slice get pass 1; and a ZSCAN cursor per scheduled ZSET (pending and
   ready of every shard) reads the same fraction of its members for pass 2. A drift the
   watermark cannot see (Redis lost a payload without a ledger change, an eviction) is thus
   found within one sweep period.

The state (watermark, the database identity it belongs to, the sweep cursors) is kept by a
:class:`ReconcileStateStore`. A run is **full** instead (the same passes as
``reconcile --full``) when there is no state (first run, or Redis lost it -- when the whole
schedule may be gone), when the namespace's database identity changed (``db upgrade
--restored``), when the namespace carries the resync mark (Redis ahead of the ledger: ADR
0014) or when asked (``full``). A dry run reads the state and writes nothing (state
included). Errors as in a full run: one bad item goes to ``report.errors``, connection
errors propagate and the state is left as it was (the next run covers the same window).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol
from uuid import UUID

from escalation.domain.errors import EscalationError, InvalidParameter
from escalation.domain.escalation import ENDED, Escalation, Status, parse_dispute_id
from escalation.domain.projection import ColumnDifference
from escalation.domain.reconcile_sweep import ID_SPACE, ReconcileState, SweepSlice, next_slice
from escalation.logs import get_logger
from escalation.ports import Scheduler, SchedulerInspection
from escalation.service_layer.reconcile import (
    NO_HOOKS,
    PAGE,
    AheadRepair,
    FullReconcile,
    PendingSource,
    ProjectionLedger,
    ReconcileHooks,
    ReconcilePorts,
    ReconcileReport,
    _check_projection,
    _db_to_redis,
    _list_unknown,
    _redis_to_db,
    _settle_mark,
    reconcile,
)
from escalation.service_layer.reconcile import _Run as _Pass

log = get_logger("escalation.reconcile")

OVERLAP_S = 30
"""Seconds below the watermark re-read by every run (a margin for the clock of a promoted
replica, and for open transactions the horizon query cannot see)."""


class ReconcileStateStore(Protocol):
    """Where the incremental state lives (adapter: ``adapters.reconcile_state.
    RedisReconcileState``), and the identity of the namespace's database."""

    def load(self) -> ReconcileState | None:
        """The saved state, or None (never saved, or lost with Redis's data)."""
        ...

    def save(self, state: ReconcileState) -> None:
        """Replace the saved state."""
        ...

    def database_identity(self) -> str | None:
        """The namespace's database identity stamp (``db upgrade``), None when unstamped."""
        ...

    def now_ms(self) -> int:
        """Redis TIME, epoch milliseconds (the sweep's clock)."""
        ...


class LedgerChanges(Protocol):
    """The ledger read by watermark (adapter: ``adapters.reconcile_state.
    PostgresLedgerChanges``)."""

    def horizon(self) -> datetime:
        """min(database clock, start of the oldest open transaction): aware UTC."""
        ...

    def changed_since(self, since: datetime, upto: datetime,
                      chunk: int) -> Iterator[list[UUID]]:
        """Distinct dispute ids with a ledger row recorded in [since, upto), in chunks of
        at most ``chunk`` (ladder chains excluded)."""
        ...

    def pending_range(self, low: int, high: int, limit: int) -> Iterator[list[Escalation]]:
        """Pending and paused escalations with low <= dispute id (as integer) < high,
        ascending, in pages of ``limit``."""
        ...


class MemberSweep(Protocol):
    """The scheduled ZSETs read a slice at a time (adapter: ``adapters.reconcile_state.
    RedisMemberSweep``)."""

    def sweep_members(self, cursors: dict[str, int],
                      fraction: float) -> tuple[list[str], dict[str, int], bool]:
        """About ``fraction`` of each scheduled ZSET's members from its cursor on:
        ``(members, next cursors, every ZSET wrapped around at least once)``."""
        ...

    def notified_since(self, since_ms: int, upto_ms: int,
                       chunk: int) -> Iterator[list[str]]:
        """Dispute ids named by the review-stream entries of [since_ms, upto_ms]."""
        ...


class ProjectionSubset(Protocol):
    """The projection against its ledger for named disputes (adapter:
    ``adapters.reconcile_state.PostgresProjectionSubset``)."""

    def differences_of(self, dispute_ids: Sequence[UUID],
                       ) -> Iterator[tuple[UUID, tuple[ColumnDifference, ...]]]:
        """As ``ProjectionLedger.differences`` for these disputes only."""
        ...

    def repair(self, dispute_id: UUID) -> tuple[ColumnDifference, ...]:
        """As ``ProjectionLedger.repair``."""
        ...


@dataclass(frozen=True, slots=True)
class IncrementalReconcile:
    """The command of one run.

    Attributes:
        sweep_period_s: the period of the slow full sweep, seconds (setting
            ``ESCALATION_RECONCILE_SWEEP_PERIOD_S``; 600 - 30 days).
        full: run the full reconcile (every pending escalation, every ZSET member).
        dry_run: only list the differences; nothing written, the state included.
        repair_projection: set differing projection rows from their ledger.
        check_projection: a full run also compares the whole projection with the ledger
            (pass 0, with ``IncrementalPorts.full_projection``; the CLI's runs; the periodic
            run does not: a whole-ledger scan every 5 minutes is too dear).
        page: PostgreSQL page / Redis chunk size, 1-10000.
        overlap_s: seconds below the watermark read again, 0-3600 (:data:`OVERLAP_S`).
        stream_overlap_s: seconds of review-stream entries read again, 0-3600
            (:data:`STREAM_OVERLAP_S`).
    """

    sweep_period_s: int
    full: bool = False
    dry_run: bool = False
    repair_projection: bool = False
    check_projection: bool = False
    page: int = PAGE
    overlap_s: int = OVERLAP_S
    stream_overlap_s: int = 300

    def __post_init__(self) -> None:
        if not 600 <= self.sweep_period_s <= 30 * 86_400:
            raise InvalidParameter(
                "{sweep_period_s} must be 600-2592000 seconds, got {got}", "sweep_period_s",
                got=self.sweep_period_s)
        if not 1 <= self.page <= 10_000:
            raise InvalidParameter("{page} must be 1-10000, got {got}", "page", got=self.page)
        if not 0 <= self.stream_overlap_s <= 3600:
            raise InvalidParameter("{stream_overlap_s} must be 0-3600 seconds, got {got}",
                                   "stream_overlap_s", got=self.stream_overlap_s)
        if not 0 <= self.overlap_s <= 3600:
            raise InvalidParameter("{overlap_s} must be 0-3600 seconds, got {got}",
                                   "overlap_s", got=self.overlap_s)


@dataclass
class IncrementalReport:
    """A run's figures on top of its :class:`ReconcileReport`.

    Attributes:
        mode: ``full`` or ``incremental``.
        reason: why a run was full (``asked``, ``no_state``, ``database_changed``,
            ``resync_mark``), empty for an incremental one.
        changed: disputes with ledger rows since the watermark.
        notified: other disputes named by review-stream entries since the previous run.
        sweep_rows: pending/paused escalations of the sweep slice.
        sweep_members: ZSET members read by the sweep slice.
        sweep_position: the sweep cursor after the run, as a fraction of the id space.
        lap_completed: the sweep wrapped around in this run.
        watermark_from / watermark_to: the window read (ISO UTC).
    """

    report: ReconcileReport
    mode: str
    reason: str = ""
    changed: int = 0
    notified: int = 0
    sweep_rows: int = 0
    sweep_members: int = 0
    sweep_position: float = 0.0
    lap_completed: bool = False
    watermark_from: str | None = None
    watermark_to: str | None = None

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: the reconcile report's fields plus ``incremental``."""
        return {**self.report.as_dict(), "incremental": {
            "mode": self.mode, "reason": self.reason, "changed": self.changed,
            "notified": self.notified,
            "sweep_rows": self.sweep_rows, "sweep_members": self.sweep_members,
            "sweep_position": round(self.sweep_position, 6),
            "lap_completed": self.lap_completed,
            "watermark_from": self.watermark_from, "watermark_to": self.watermark_to}}


class _Subset:
    """A :class:`ProjectionLedger` over named disputes (pass 0 of an incremental run)."""

    def __init__(self, source: ProjectionSubset, ids: Sequence[UUID]) -> None:
        self._source, self._ids = source, ids

    def differences(self) -> Iterator[tuple[UUID, tuple[ColumnDifference, ...]]]:
        return self._source.differences_of(self._ids)

    def repair(self, dispute_id: UUID) -> tuple[ColumnDifference, ...]:
        return self._source.repair(dispute_id)


def _full_reason(cmd: IncrementalReconcile, state: ReconcileState | None,
                 identity: str | None, ahead: AheadRepair | None) -> str:
    if cmd.full:
        return "asked"
    if state is None:
        return "no_state"
    if state.database != identity:
        return "database_changed"
    if ahead is not None and ahead.mark.resync() is not None:
        return "resync_mark"
    return ""


@dataclass(frozen=True, slots=True)
class IncrementalPorts:
    """The ports of :func:`reconcile_incremental`.

    Attributes:
        scheduler / store / redis_side / ahead: as
            :func:`~escalation.service_layer.reconcile.reconcile`.
        changes: the ledger since the watermark and the sweep's id ranges.
        members: the scheduled ZSETs, a slice at a time.
        state_store: the watermark and sweep cursors.
        projection: pass 0 over the changed disputes (None: skipped).
        full_projection: pass 0 of a full run, when ``IncrementalReconcile.check_projection``
            asks for it (None: skipped, as the periodic run does).
    """

    scheduler: Scheduler
    store: PendingSource
    redis_side: SchedulerInspection
    changes: LedgerChanges
    members: MemberSweep
    state_store: ReconcileStateStore
    ahead: AheadRepair | None = None
    projection: ProjectionSubset | None = None
    full_projection: ProjectionLedger | None = None


@dataclass(frozen=True, slots=True)
class _Run:
    """One run's command, ports and hooks, as the passes below read them."""

    cmd: IncrementalReconcile
    ports: IncrementalPorts
    hooks: ReconcileHooks


def reconcile_incremental(
    cmd: IncrementalReconcile, ports: IncrementalPorts, hooks: ReconcileHooks = NO_HOOKS,
) -> IncrementalReport:
    """One incremental (or, see the module doc, full) reconcile run.

    Args:
        cmd: what to run (:class:`IncrementalReconcile`).
        ports: what it reads and repairs (:class:`IncrementalPorts`).
        hooks: progress and restored escalations (:class:`ReconcileHooks`).

    Returns:
        IncrementalReport (``report``: the differences, repairs and errors).

    Raises:
        Connection errors propagate; the state is then not advanced.
    """
    scheduler, store, redis_side = ports.scheduler, ports.store, ports.redis_side
    changes, members, state_store = ports.changes, ports.members, ports.state_store
    ahead, progress = ports.ahead, hooks.progress
    run = _Run(cmd, ports, hooks)
    state = state_store.load()
    identity = state_store.database_identity()
    reason = _full_reason(cmd, state, identity, ahead)
    upto = changes.horizon()
    now_ms = state_store.now_ms()
    if reason:
        rep = reconcile(FullReconcile(cmd.dry_run, cmd.page, cmd.repair_projection),
                        ReconcilePorts(scheduler, store, redis_side,
                                       ports.full_projection if cmd.check_projection else None,
                                       ahead), hooks)
        out = IncrementalReport(rep, "full", reason, watermark_to=upto.isoformat())
        if not cmd.dry_run:
            base = state if state is not None else ReconcileState(upto, identity)
            state_store.save(replace(base, watermark=upto, database=identity,
                                     stream_ms=now_ms))
        _log(out)
        return out
    if state is None:  # unreachable: no state makes the run full
        raise RuntimeError("reconcile state missing")
    report = ReconcileReport(dry_run=cmd.dry_run)
    since = state.watermark - timedelta(seconds=cmd.overlap_s)
    out = IncrementalReport(report, "incremental", watermark_from=since.isoformat(),
                            watermark_to=upto.isoformat())
    unknown: list[str] = []
    done: set[UUID] = set()
    for ids in changes.changed_since(since, upto, cmd.page):
        done.update(ids)
        out.changed += len(ids)
        unknown += _changed(ids, run, report)
        progress("changed", out.changed, None)
    # the disputes of the decisions notified since the previous run: a decision Redis
    # applied and notified that the ledger lost (an asynchronous replica promoted) shows
    # as a payload ahead of the ledger here, within one run
    stream_from = (now_ms if state.stream_ms is None else state.stream_ms) \
        - cmd.stream_overlap_s * 1000
    for named in members.notified_since(stream_from, now_ms, cmd.page):
        ids = [u for u in _uuids(named) if u not in done]
        done.update(ids)
        out.notified += len(ids)
        if ids:
            unknown += _changed(ids, run, report)
    part = next_slice(state, now_ms, cmd.sweep_period_s)
    cursors, swept_unknown = _sweep(part, state, run, out)
    unknown += swept_unknown
    if ahead is not None and unknown:
        _list_unknown(ahead, sorted(set(unknown)), report, cmd.dry_run)
    if ahead is not None and not cmd.dry_run:
        # only a full run may clear the resync mark; an incremental one only sets it
        _settle_mark(replace(ahead, ledger=None), report)
    lap_done = part.wraps
    out.lap_completed = lap_done
    nxt = replace(state, watermark=upto, database=identity,
                  sweep_cursor=0 if lap_done else part.high, sweep_at_ms=now_ms,
                  lap_started_ms=(now_ms if lap_done or state.lap_started_ms is None
                                  else state.lap_started_ms),
                  member_cursors=cursors, stream_ms=now_ms,
                  laps=state.laps + (1 if lap_done else 0))
    out.sweep_position = nxt.sweep_cursor / ID_SPACE
    if not cmd.dry_run:
        state_store.save(nxt)
    _log(out)
    return out


def _sweep(part: SweepSlice, state: ReconcileState, run: _Run,
           out: IncrementalReport) -> tuple[dict[str, int], list[str]]:
    """One sweep slice: pass 1 over the pending/paused escalations of the id range, pass 2
    over the ZSET members of the ZSCAN step. Returns the next ZSCAN cursors and the members
    the ledger does not know."""
    cmd, ports, on_restored = run.cmd, run.ports, run.hooks.on_restored
    scheduler, store, redis_side = ports.scheduler, ports.store, ports.redis_side
    report = out.report
    passes = _Pass(scheduler, redis_side, report, cmd.dry_run, store, ports.ahead)
    for rows in ports.changes.pending_range(part.low, part.high, cmd.page):
        out.sweep_rows += len(rows)
        report.checked_db += len(rows)
        restored = _db_to_redis(rows, passes)
        if restored and on_restored is not None:
            on_restored(restored)
        run.hooks.progress("sweep", out.sweep_rows, None)
    swept, cursors, _ = ports.members.sweep_members(dict(state.member_cursors), part.fraction)
    out.sweep_members = len(swept)
    report.checked_members += len(swept)
    unknown: list[str] = []
    for start in range(0, len(swept), cmd.page):
        unknown += _redis_to_db(swept[start:start + cmd.page], store, passes)
    return cursors, unknown


def _changed(ids: list[UUID], run: _Run, report: ReconcileReport) -> list[str]:
    """Every check of a full run on one chunk of changed disputes; returns the members the
    ledger does not know."""
    cmd, ports, on_restored = run.cmd, run.ports, run.hooks.on_restored
    scheduler, store, redis_side = ports.scheduler, ports.store, ports.redis_side
    ahead, projection = ports.ahead, ports.projection
    untrusted: set[str] = set()
    if projection is not None:
        untrusted = _check_projection(_Subset(projection, ids), report, cmd.dry_run,
                                      cmd.repair_projection)
    known = store.get_many([i for i in ids if str(i) not in untrusted])
    live = [e for e in known.values() if e.status in (Status.PENDING, Status.PAUSED)]
    live.sort(key=lambda e: e.dispute_id)
    report.checked_db += len(live)
    passes = _Pass(scheduler, redis_side, report, cmd.dry_run, store, ahead)
    restored = _db_to_redis(live, passes)
    if restored and on_restored is not None:
        on_restored(restored)
    # a dispute that is no longer pending (or that the ledger has no projection for) must
    # not stay scheduled: the Redis -> PostgreSQL pass over those that still are
    others = [str(i) for i in ids if str(i) not in untrusted
              and ((e := known.get(i)) is None or e.status in ENDED
                   or e.status is Status.PAUSED)]
    scheduled = _scheduled(redis_side, others)
    report.checked_members += len(scheduled)
    return _redis_to_db(scheduled, store, passes)


def _uuids(named: Iterable[str]) -> list[UUID]:
    out = []
    for raw in named:
        try:
            out.append(parse_dispute_id(raw))
        except EscalationError:
            continue
    return out


def _scheduled(redis_side: SchedulerInspection, ids: Iterable[str]) -> list[str]:
    wanted = list(ids)
    if not wanted:
        return []
    seen = redis_side.inspect(wanted)
    return [m for m in wanted if seen[m].score_ms is not None]


def _log(out: IncrementalReport) -> None:
    rep = out.report
    log.info("reconcile.run", mode=out.mode, reason=out.reason, changed=out.changed,
             notified=out.notified,
             sweep_rows=out.sweep_rows, sweep_members=out.sweep_members,
             sweep_position=round(out.sweep_position, 6), lap_completed=out.lap_completed,
             watermark_from=out.watermark_from, watermark_to=out.watermark_to,
             checked_db=rep.checked_db, checked_members=rep.checked_members,
             differences=len(rep.diffs), repaired=rep.count(repaired=True),
             errors=len(rep.errors), dry_run=rep.dry_run)
