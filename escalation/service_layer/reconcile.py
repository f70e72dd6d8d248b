"""Use case: reconcile Redis with PostgreSQL (the truth); see docs/reliability.md.

PostgreSQL's projection (``escalation_state``) says what is pending; Redis is a rebuildable
index of it. Two passes, both safe alongside live workers:

1. **PostgreSQL -> Redis**: every pending/paused escalation (keyset pages) is compared with its
   Redis payload/member/lock. A missing payload (``MISSING``), a payload behind the recorded
   sequence number (``BEHIND``) or a pending payload without ZSET member (``MISSING_MEMBER``; a
   member of the ready ZSET -- due, waiting for a claim, ADR 0006 -- counts as scheduled) is
   repaired with ``scheduler.restore`` (apply.lua in restore mode: seq-guarded, never touches a
   locked member, never re-creates a terminal one). A BEHIND payload whose gap holds a
   recorded PROMOTED/TERMINAL decision (recorded, never applied: a worker killed after the
   ledger commit, or the apply lost in a Redis failover) is repaired by an owner-less apply
   that also sends that decision's review-stream entry (seq-guarded: at most once), so the
   repair does not drop the notification. A locked member is left alone (``LOCKED``:
   its worker's apply, or its lease expiry, settles it). Escalations dead-lettered as poison
   decisions are skipped.
   A payload *ahead* of PostgreSQL (``AHEAD``: audit-before-apply makes it impossible unless
   the ledger went back in time -- a restore to an earlier point, a failover to a replica
   that lacked the last commits), or a missing payload whose review stream holds a decision
   the ledger lacks (a terminal decision lost from the ledger), means Redis is ahead of the
   ledger (ADR 0014). With :class:`AheadRepair` and its ``ledger`` (``escalation
   reconcile``), each is reset to the ledger's state: the Redis member and payload are
   removed, a SCHEDULE_RESET row naming the decisions Redis held (from the review stream's
   entries) is appended to the dispute's chain, and the ledger's state is restored (due
   again: a worker re-decides it, after the SCHEDULE_RESET row). Without the ledger (the
   maintenance run) the namespace is only marked for a resync (workers refuse to fire it
   until an operator runs ``escalation reconcile``). A run that leaves nothing ahead and no
   error clears the mark.
2. **Redis -> PostgreSQL**: every ZSET member (pending and ready) is looked up; members
   PostgreSQL says are terminal/cancelled (``TERMINAL_MEMBER``) or does not know
   (``UNKNOWN_MEMBER``) are removed, paused ones (``PAUSED_MEMBER``) are taken out of the
   ZSET (payload kept), with
   ``reconcile_remove.lua`` (lock-aware and seq-guarded). Members are read from Redis *before*
   PostgreSQL is asked about them, and enqueue records in PostgreSQL before writing Redis, so a
   member being enqueued concurrently is never mistaken for an unknown one.

0. **projection -> ledger** (when given a :class:`ProjectionLedger`; ``escalation
   reconcile``): the projection is not trusted. Every projection row is compared with the
   columns its ledger chain determines (``domain.projection``: status, tier, due time,
   deadlines, obligations, materiality, ...); each differing column is a ``PROJECTION``
   difference naming the column and both values. With ``repair_projection`` (``reconcile
   --repair-projection``) the row is set from its ledger, under its row lock, only when the
   chain verifies up to the projection's head (else an error for that dispute); without it,
   or when the repair fails, the dispute is left out of both Redis passes, so a forged
   projection row is never copied into Redis (docs/reliability.md, "Projection against the
   ledger").

``dry_run`` computes the same differences and writes nothing.

A repair run does not stop on one bad item: an escalation Redis refuses (e.g. ``EINVAL apply:
op 1: bad due_ms`` for a due time outside the epoch-ms range) or a member whose removal fails
is recorded in :attr:`ReconcileReport.errors` (dispute id + message) and the run continues
with the rest; the CLI prints the count and ids and exits 1. Connection errors still
propagate (nothing can be repaired without the servers; reconcile can be re-run).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol
from uuid import UUID

from escalation.domain.errors import EscalationError
from escalation.domain.escalation import ENDED, Escalation, Status, parse_dispute_id
from escalation.domain.projection import ColumnDifference
from escalation.domain.timeutil import to_ms
from escalation.logs import get_logger
from escalation.ports import (
    ApplyOutcome,
    LedgerEvent,
    LedgerRow,
    ResyncMark,
    Scheduler,
    SchedulerInspection,
)
from escalation.service_layer.fire import lost_notifications, unapplied_notifications
from escalation.service_layer.progress_report import Progress, no_progress

PAGE = 1000
log = get_logger("escalation.reconcile")
SCHEDULE_RESET = "SCHEDULE_RESET"
"""The ledger event of a reset of Redis to the ledger's state (ADR 0014)."""
REDIS_AHEAD = "REDIS_AHEAD"
"""Its ``match_decision``: the recovery it names."""


class DiffKind(StrEnum):
    """Kinds of difference between PostgreSQL and Redis."""

    MISSING = "MISSING"
    MISSING_MEMBER = "MISSING_MEMBER"
    BEHIND = "BEHIND"
    AHEAD = "AHEAD"
    LOCKED = "LOCKED"
    TERMINAL_MEMBER = "TERMINAL_MEMBER"
    UNKNOWN_MEMBER = "UNKNOWN_MEMBER"
    PAUSED_MEMBER = "PAUSED_MEMBER"
    PROJECTION = "PROJECTION"


@dataclass(frozen=True, slots=True)
class Diff:
    """One difference: ``kind``, the dispute id (ZSET member), and a short detail (for
    people). ``held``: for a ``LOCKED`` difference, the kind of difference left to the
    worker holding the lease (code acts on it, never on ``detail``)."""

    kind: DiffKind
    dispute_id: str
    detail: str = ""
    repaired: bool = False
    held: DiffKind | None = None


@dataclass
class ReconcileReport:
    """Result of one reconcile run.

    Attributes:
        checked_db: pending/paused escalations read from PostgreSQL.
        checked_members: ZSET members read from Redis.
        diffs: every difference found (``repaired`` tells whether it was fixed).
        errors: ``(dispute id or member, message)`` of items that could not be checked or
            repaired; the run went on with the others.
        dry_run: nothing was written.
    """

    dry_run: bool
    checked_db: int = 0
    checked_members: int = 0
    diffs: list[Diff] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    lost_decisions: list[dict[str, str]] = field(default_factory=list)
    """Review-stream entries of decisions Redis applied and notified but the ledger lacks
    (each with ``dispute_id``, ``seq``, ``match_decision``, ``to_tier``, ``decided_ms``,
    ``entry_id``): the list for review; each is also named on its SCHEDULE_RESET row."""
    resync_cleared: bool = False

    def count(self, kind: DiffKind | None = None, *, repaired: bool | None = None) -> int:
        """Number of diffs of ``kind`` (all kinds when None), optionally only (un)repaired."""
        return sum(1 for d in self.diffs if (kind is None or d.kind is kind)
                   and (repaired is None or d.repaired is repaired))

    def summary(self) -> str:
        """One line for the end of a run, e.g. ``reconcile: checked 200000 rows and 200000
        members, 3 difference(s), 3 repaired, 0 error(s)``."""
        return (f"reconcile{' (dry run)' if self.dry_run else ''}: checked {self.checked_db} "
                f"rows and {self.checked_members} members, {len(self.diffs)} difference(s), "
                f"{self.count(repaired=True)} repaired, {len(self.errors)} error(s)")

    def as_dict(self) -> dict[str, object]:
        """JSON-ready summary: counts per kind and the first 100 diffs."""
        kinds = {k.value: self.count(k) for k in DiffKind if self.count(k)}
        return {"dry_run": self.dry_run, "checked_db": self.checked_db,
                "checked_members": self.checked_members, "differences": kinds,
                "repaired": self.count(repaired=True),
                "errors": len(self.errors),
                "error_ids": [i for i, _ in self.errors[:100]],
                "error_messages": [m for _, m in self.errors[:100]],
                "diffs": [{"kind": d.kind.value, "dispute_id": d.dispute_id,
                           "detail": d.detail, "repaired": d.repaired} for d in self.diffs[:100]],
                "lost_decisions": len(self.lost_decisions),
                "lost_decision_entries": self.lost_decisions[:100],
                "resync_cleared": self.resync_cleared}


class PendingSource(Protocol):
    """The part of the audit store reconcile reads (PostgresAuditStore satisfies it)."""

    def pending_page(self, after: UUID | None, limit: int,
                     statuses: tuple[Status, ...] = ...) -> list[Escalation]:
        """Keyset page of escalations with the given statuses, dispute id ascending."""
        ...

    def get_many(self, dispute_ids: list[UUID]) -> dict[UUID, Escalation]:
        """Recorded states by dispute id (unknown ids absent)."""
        ...

    def unapplied_decisions(
        self, ranges: Sequence[tuple[UUID, int, int]]
    ) -> dict[UUID, LedgerRow]:
        """Latest PROMOTED/TERMINAL row with after < seq <= upto per (dispute, after, upto)."""
        ...


class LostDecisionReader(Protocol):
    """The review streams read for decisions the ledger lacks (``ReliabilityRedis``)."""

    def review_after(self, wanted: Mapping[str, tuple[int, int]],
                     count: int = 1000) -> dict[str, list[dict[str, str]]]:
        """dispute id -> its review-stream entries with a seq above the ledger's;
        ``wanted``: dispute id -> (ledger seq, epoch ms to read from)."""
        ...


class ResetLedger(Protocol):
    """The ledger write of a reset (``PostgresAuditStore.append_event``)."""

    def append_event(self, entry: LedgerEvent) -> Escalation:
        """Append one ledger row (CAS on ``entry.expected_seq``); the new projection
        state."""
        ...


@dataclass(frozen=True)
class AheadRepair:
    """How a reconcile run treats Redis ahead of the ledger (ADR 0014).

    Attributes:
        mark: the namespace's resync mark (set when something is found ahead and not reset;
            cleared by a repairing run that leaves nothing ahead and no error).
        stream: the review streams (the decisions Redis notified that the ledger lacks).
        ledger: where the SCHEDULE_RESET rows go; None = do not reset, only report and
            mark the namespace (the maintenance run: the reset is an operator's command).
        actor: the actor of the SCHEDULE_RESET rows.
    """

    mark: ResyncMark
    stream: LostDecisionReader
    ledger: ResetLedger | None = None
    actor: str = "reconcile"


class ProjectionLedger(Protocol):
    """The projection against its ledger (adapter:
    ``adapters.projection_scan.PostgresProjectionLedger``)."""

    def differences(self) -> Iterator[tuple[UUID, tuple[ColumnDifference, ...]]]:
        """``(dispute_id, differing columns)`` of every projection row that differs from
        its ledger, by dispute id, streamed in one snapshot."""
        ...

    def repair(self, dispute_id: UUID) -> tuple[ColumnDifference, ...]:
        """Set the differing columns from the ledger (chain verified up to the projection's
        head, under the row lock); returns what changed. Raises ConflictError when the
        ledger cannot be trusted for it; nothing written then."""
        ...


def _check_projection(projection: ProjectionLedger, report: ReconcileReport, dry_run: bool,
                      repair: bool) -> set[str]:
    """Pass 0 (module doc): report every projection column that differs from the ledger,
    repair it when asked; returns the disputes left out of the Redis passes."""
    found = list(projection.differences())  # the snapshot ends before any repair starts
    left_out: set[str] = set()
    for did, columns in found:
        fixed = False
        if repair and not dry_run:
            try:
                projection.repair(did)
                fixed = True
            except ITEM_ERRORS as exc:
                report.errors.append((str(did), f"{DiffKind.PROJECTION.value}: {exc}"))
        report.diffs += [Diff(DiffKind.PROJECTION, str(did), c.render(), repaired=fixed)
                         for c in columns]
        log.warning("reconcile.projection_differs", dispute_id=str(did),
                    match_decision="PROJECTION_DIFFERS", repaired=fixed,
                    columns=[c.column.value for c in columns],
                    differences=[c.render() for c in columns])
        if not fixed:
            left_out.add(str(did))
    return left_out


def _pages(store: PendingSource, page: int) -> Iterator[list[Escalation]]:
    after: UUID | None = None
    while True:
        rows = store.pending_page(after, page, (Status.PENDING, Status.PAUSED))
        if not rows:
            return
        yield rows
        after = rows[-1].dispute_id
        if len(rows) < page:
            return


@dataclass(frozen=True, slots=True)
class FullReconcile:
    """A full reconcile run (the command of :func:`reconcile`).

    ``dry_run``: only list the differences; ``page``: PostgreSQL page / Redis chunk size
    (1-10000); ``repair_projection``: set differing projection rows from their ledger
    (pass 0, with ``ReconcilePorts.projection``).
    """

    dry_run: bool = False
    page: int = PAGE
    repair_projection: bool = False


@dataclass(frozen=True, slots=True)
class ReconcilePorts:
    """What :func:`reconcile` reads and repairs.

    ``scheduler``: the Redis scheduler (its ``restore`` does the seq-guarded repairs);
    ``store``: PostgreSQL (``pending_page``, ``get_many``, ``unapplied_decisions``);
    ``redis_side``: reliability reads/scripts on the same namespace and shard count;
    ``projection``: compare the projection with the ledger first (pass 0); None skips it
    (the leader's periodic run: a whole-ledger scan every 5 minutes is too dear);
    ``ahead``: what to do with Redis ahead of the ledger (:class:`AheadRepair`); None: only
    report AHEAD payloads (missing payloads are restored as before).
    """

    scheduler: Scheduler
    store: PendingSource
    redis_side: SchedulerInspection
    projection: ProjectionLedger | None = None
    ahead: AheadRepair | None = None


@dataclass(frozen=True, slots=True)
class ReconcileHooks:
    """What the caller observes a run with: ``progress`` (phase, done, total: ``("postgres",
    rows checked, None)`` after each PostgreSQL page, ``("redis", members checked, None)``
    after each Redis chunk) and ``on_restored`` (the pending escalations whose payload the
    run re-created or brought up to date (MISSING, BEHIND): the keys lost with a payload may
    hold their pre-breach warnings too, which the CLI and the maintenance job schedule;
    scheduling is idempotent)."""

    progress: Progress = no_progress
    on_restored: Callable[[Sequence[Escalation]], object] | None = None


NO_HOOKS = ReconcileHooks()
"""No progress reports, nothing told of restored escalations."""


@dataclass(frozen=True, slots=True)
class _Run:
    """One run's ports, report and mode, as the private passes below share them."""

    scheduler: Scheduler
    redis_side: SchedulerInspection
    report: ReconcileReport
    dry_run: bool
    store: PendingSource | None = None
    ahead: AheadRepair | None = None


def reconcile(cmd: FullReconcile, ports: ReconcilePorts,
              hooks: ReconcileHooks = NO_HOOKS) -> ReconcileReport:
    """Compare PostgreSQL with Redis and repair Redis (see the module docstring).

    Args:
        cmd: what to run (:class:`FullReconcile`).
        ports: what it reads and repairs (:class:`ReconcilePorts`).
        hooks: progress and restored escalations (:class:`ReconcileHooks`).

    Returns:
        ReconcileReport.

    Raises:
        Redis / database connection errors propagate (reconcile can be re-run at any time).
        An error about one item (:data:`ITEM_ERRORS`) does not: it goes to ``report.errors``.
    """
    dry_run, page = cmd.dry_run, cmd.page
    scheduler, store, redis_side = ports.scheduler, ports.store, ports.redis_side
    projection, ahead = ports.projection, ports.ahead
    progress, on_restored = hooks.progress, hooks.on_restored
    report = ReconcileReport(dry_run=dry_run)
    run = _Run(scheduler, redis_side, report, dry_run, store, ahead)
    unknown: list[str] = []  # members the ledger does not know (pass 2), for ``ahead``
    untrusted: set[str] = set()
    if projection is not None:
        untrusted = _check_projection(projection, report, dry_run, cmd.repair_projection)
    for page_rows in _pages(store, page):
        report.checked_db += len(page_rows)
        rows = [e for e in page_rows if str(e.dispute_id) not in untrusted]
        restored = _db_to_redis(rows, run)
        if restored and on_restored is not None:
            on_restored(restored)
        progress("postgres", report.checked_db, None)
    for chunks in redis_side.scan_shards(page):  # per shard: pending + ready (ADR 0006)
        seen: set[str] = set()  # a member moved pending -> ready mid-scan is read twice
        for chunk in chunks:
            members = [m for m, _ in chunk if m not in seen]
            seen.update(members)
            report.checked_members += len(members)
            members = [m for m in members if m not in untrusted]
            unknown += _redis_to_db(members, store, run)
            progress("redis", report.checked_members, None)
    if ahead is not None and unknown:
        _list_unknown(ahead, unknown, report, dry_run)
    if ahead is not None and not dry_run:
        _settle_mark(ahead, report)
    return report


def _list_unknown(ahead: AheadRepair, unknown: list[str], report: ReconcileReport,
                  dry_run: bool) -> None:
    """Members the ledger does not know at all (a new or restored database under a used
    namespace; removed as UNKNOWN_MEMBER): the decisions their review streams hold were
    notified and have no chain to be named on, so they are listed for review
    (``lost_decisions``, each with ``unknown_to_ledger``), with one read of each stream.
    Without a ledger to reset into (the periodic run) the namespace is also marked."""
    later = ahead.stream.review_after({m: (0, 0) for m in unknown})
    for member, entries in later.items():
        report.lost_decisions += [{**_entry_summary(member, x), "unknown_to_ledger": "true"}
                                  for x in entries]
    if later and ahead.ledger is None and not dry_run:
        ahead.mark.mark_resync(
            "unknown_in_reconcile",
            f"{len(later)} member(s) unknown to the ledger had notified decisions, e.g. "
            f"{sorted(later)[:5]}: run `escalation reconcile` to list them")


def _settle_mark(ahead: AheadRepair, report: ReconcileReport) -> None:
    """Clear the resync mark after a resetting run that left nothing ahead and no error;
    mark the namespace when a run that does not reset found Redis ahead."""
    left = [d.dispute_id for d in report.diffs
            if (d.kind is DiffKind.AHEAD and not d.repaired)
            or d.held is DiffKind.AHEAD]
    if ahead.ledger is not None:
        if not left and not report.errors:
            report.resync_cleared = ahead.mark.clear_resync()
        return
    if left:
        ahead.mark.mark_resync(
            "ahead_in_reconcile",
            f"{len(left)} escalation(s) ahead of the ledger in Redis, e.g. {left[:5]}: run "
            "`escalation reconcile`")


ITEM_ERRORS: tuple[type[BaseException], ...] = (EscalationError, ValueError, OverflowError)
"""Errors that concern one item (a script refusing it -- the scheduler raises
``ScriptRefused``, an EscalationError --, a value out of range): recorded in
``report.errors``, the run goes on. Connection errors are not among them."""


def _restore(scheduler: Scheduler, todo: list[tuple[Escalation, DiffKind, str]],
             report: ReconcileReport,
             notes: Mapping[UUID, dict[str, str]] | None = None,
             restored: list[Escalation] | None = None) -> None:
    """``scheduler.restore`` the batch; if Redis refuses it (one bad op fails the whole
    script call), restore item by item so one bad escalation does not block the others.
    Pending escalations re-created or brought up to date are appended to ``restored``."""
    if restored is None:
        restored = []
    try:
        mine = {e.dispute_id: notes[e.dispute_id] for e, _, _ in todo
                if notes and e.dispute_id in notes}
        outcomes = scheduler.restore([e for e, _, _ in todo], mine or None)
    except ITEM_ERRORS:
        if len(todo) == 1:
            raise
        for item in todo:
            try:
                _restore(scheduler, [item], report, notes, restored)
            except ITEM_ERRORS as exc:
                esc, kind, detail = item
                did = str(esc.dispute_id)
                report.errors.append((did, f"{kind.value}: {exc}"))
                report.diffs.append(Diff(kind, did, f"{detail}: FAILED: {exc}"))
        return
    for (esc, kind, detail), outcome in zip(todo, outcomes, strict=True):
        report.diffs.append(Diff(kind, str(esc.dispute_id), f"{detail}: {outcome.value}",
                                 repaired=outcome is ApplyOutcome.APPLIED))
        if (outcome is ApplyOutcome.APPLIED
                and kind in (DiffKind.MISSING, DiffKind.BEHIND, DiffKind.AHEAD)
                and esc.status is Status.PENDING):
            restored.append(esc)


Todo = list[tuple[Escalation, DiffKind, str]]
Gaps = list[tuple[DiffKind, tuple[UUID, int, int]]]


def _classify(rows: list[Escalation], seen: Mapping[str, Any],
              report: ReconcileReport) -> tuple[Todo, Gaps, list[Escalation]]:
    """One page's differences: what to restore, the seq ranges of BEHIND / MISSING, and
    the escalations whose payload is ahead of the page (to confirm: :func:`_confirm`)."""
    ahead_of: list[Escalation] = []
    todo: Todo = []
    gaps: Gaps = []
    for esc in rows:
        did = str(esc.dispute_id)
        got = seen[did]
        if got.dead:
            continue
        pending = esc.status is Status.PENDING
        if got.payload_seq is None:
            kind, detail = DiffKind.MISSING, f"no payload; PostgreSQL seq {esc.seq}"
        elif got.payload_seq < esc.seq:
            kind, detail = DiffKind.BEHIND, f"payload seq {got.payload_seq} < {esc.seq}"
        elif got.payload_seq > esc.seq:
            ahead_of.append(esc)
            continue
        elif pending and got.score_ms is None:
            try:
                kind, detail = DiffKind.MISSING_MEMBER, f"due {to_ms(esc.due_at)} ms"
            except ITEM_ERRORS as exc:
                report.errors.append((did, f"MISSING_MEMBER: {exc}"))
                continue
        else:
            continue
        if got.locked:
            report.diffs.append(Diff(DiffKind.LOCKED, did, f"{kind.value} left to its worker",
                                     held=kind))
            continue
        todo.append((esc, kind, detail))
        if kind in (DiffKind.BEHIND, DiffKind.MISSING):
            gaps.append((kind, (esc.dispute_id, got.payload_seq or 0, esc.seq)))
    return todo, gaps, ahead_of


def _db_to_redis(rows: list[Escalation], run: _Run) -> list[Escalation]:
    """Repair one PostgreSQL page's differences; returns the pending escalations restored."""
    scheduler, redis_side, report = run.scheduler, run.redis_side, run.report
    dry_run, store, ahead = run.dry_run, run.store, run.ahead
    seen = redis_side.inspect([str(e.dispute_id) for e in rows])
    todo, gaps, ahead_of = _classify(rows, seen, report)
    ahead_of = _confirm(store, ahead_of, seen)
    restored: list[Escalation] = []
    if ahead is None:
        report.diffs += [Diff(DiffKind.AHEAD, str(e.dispute_id),
                              f"payload seq {seen[str(e.dispute_id)].payload_seq} > {e.seq}")
                         for e in ahead_of]
    elif ahead_of or gaps:
        todo, gaps = _reset_ahead(run, ahead, _Page(seen, todo, gaps, ahead_of, restored))
    if dry_run or not todo:
        report.diffs += [Diff(k, str(e.dispute_id), d) for e, k, d in todo]
        return restored
    # a decision recorded but never applied (worker killed between record and apply, or the
    # apply lost in a failover) was never notified: the repair sends it, at most once
    # (apply.lua's notify seq guard)
    notes = _repair_notes(store, redis_side, gaps)
    try:
        _restore(scheduler, todo, report, notes, restored)
    except ITEM_ERRORS as exc:  # a batch of one that failed
        esc, kind, detail = todo[0]
        report.errors.append((str(esc.dispute_id), f"{kind.value}: {exc}"))
        report.diffs.append(Diff(kind, str(esc.dispute_id), f"{detail}: FAILED: {exc}"))
    return restored


def _confirm(store: PendingSource | None, ahead_of: list[Escalation],
             seen: Mapping[str, Any]) -> list[Escalation]:
    """The escalations still ahead of the ledger once it is read again, in their ledger
    state of now. The page was read before Redis, and a worker records before it applies:
    a decision recorded and applied between the two reads shows a payload ahead of the
    page, but never ahead of a ledger read after Redis. Without ``store``: ``ahead_of``."""
    if store is None or not ahead_of:
        return ahead_of
    now = store.get_many([e.dispute_id for e in ahead_of])
    return [cur for e in ahead_of
            if (cur := now.get(e.dispute_id)) is not None
            and seen[str(e.dispute_id)].payload_seq > cur.seq]


@dataclass(frozen=True, slots=True)
class _Page:
    """What the comparison of one PostgreSQL page found: Redis's view of its members
    (``seen``), the repairs to make (``todo``), the seq gaps to notify (``gaps``), the
    payloads ahead of the ledger (``ahead_of``) and the escalations restored so far."""

    seen: Mapping[str, Any]
    todo: Todo
    gaps: Gaps
    ahead_of: list[Escalation]
    restored: list[Escalation]


@dataclass(frozen=True, slots=True)
class _Lost:
    """One escalation found ahead of the ledger: the review-stream ``entries`` the ledger
    lacks, the highest seq Redis used (``top``) and the line that describes it."""

    esc: Escalation
    entries: list[dict[str, str]]
    top: int
    detail: str


def _reset_ahead(run: _Run, ahead: AheadRepair, pg: _Page) -> tuple[Todo, Gaps]:
    """Find what is ahead of the ledger on one page -- payloads ahead, and missing payloads
    whose review stream holds a later decision (a terminal decision the ledger lost) --
    and reset each (or only report it: dry run, or no ``ahead.ledger``). A missing payload
    is ahead only if the ledger, read again after the stream, still lacks the decision: a
    terminal decision recorded, applied and notified since the page was read is not lost.

    Returns ``todo`` and ``gaps`` without the missing payloads found ahead (handled here)."""
    ahead_of, todo, gaps, seen = pg.ahead_of, pg.todo, pg.gaps, pg.seen
    report, dry_run, store = run.report, run.dry_run, run.store
    missing = [e for e, k, _ in todo if k is DiffKind.MISSING]
    wanted = {str(e.dispute_id): (e.seq, to_ms(e.entered_tier_at))
              for e in (*ahead_of, *missing)}
    later = ahead.stream.review_after(wanted) if wanted else {}
    lost = [e for e in missing if str(e.dispute_id) in later]
    moved: set[UUID] = set()  # the ledger moved on since the page: the next run sees it
    if lost and store is not None:
        now = store.get_many([e.dispute_id for e in lost])
        still = []
        for e in lost:
            cur = now.get(e.dispute_id, e)
            if cur.seq > e.seq:
                moved.add(e.dispute_id)
            entries = [x for x in later[str(e.dispute_id)] if _seq(x) > cur.seq]
            if entries:
                later[str(e.dispute_id)] = entries
                still.append(cur)
        lost = still
    lost_missing = {e.dispute_id for e in lost} | moved
    if lost_missing:
        todo = [t for t in todo if t[0].dispute_id not in lost_missing]
        gaps = [g for g in gaps if g[1][0] not in lost_missing]
    for esc in (*ahead_of, *lost):
        did = str(esc.dispute_id)
        entries = later.get(did, [])
        redis_seq = seen[did].payload_seq
        top = max([redis_seq or 0, *(_seq(x) for x in entries)])
        detail = (f"Redis seq {redis_seq if redis_seq is not None else 'none'}, review "
                  f"stream up to seq {top}, ledger seq {esc.seq}: {len(entries)} notified "
                  "decision(s) the ledger lacks")
        report.lost_decisions += [_entry_summary(did, x) for x in entries]
        if dry_run or ahead.ledger is None:
            report.diffs.append(Diff(DiffKind.AHEAD, did, detail))
            continue
        _reset_one(run, ahead, ahead.ledger, _Lost(esc, entries, top, detail), pg.restored)
    return todo, gaps


def _seq(entry: Mapping[str, str]) -> int:
    return int(entry.get("seq", "0") or 0)


_LOST_FIELDS = ("seq", "match_decision", "from_tier", "to_tier", "decided_ms", "entry_id",
                "idempotency_key", "trace_id")


def _entry_summary(dispute_id: str, entry: Mapping[str, str]) -> dict[str, str]:
    return {"dispute_id": dispute_id, **{k: str(entry[k]) for k in _LOST_FIELDS if k in entry}}


def _reset_one(run: _Run, ahead: AheadRepair, ledger: ResetLedger, lost_one: _Lost,
               restored: list[Escalation]) -> None:
    """Reset one escalation: Redis member and payload removed, one SCHEDULE_RESET row per
    sequence number Redis used beyond the ledger (each naming the decision notified at that
    seq, when the stream still holds it), then the ledger's state restored. The re-decision
    thus gets a seq (and an idempotency key) no lost notification used."""
    esc, entries, top, detail = lost_one.esc, lost_one.entries, lost_one.top, lost_one.detail
    scheduler, redis_side, report = run.scheduler, run.redis_side, run.report
    did = str(esc.dispute_id)
    try:
        result = redis_side.remove_member(did, esc.seq, "reset")
    except ITEM_ERRORS as exc:
        report.errors.append((did, f"AHEAD: {exc}"))
        report.diffs.append(Diff(DiffKind.AHEAD, did, f"{detail}: FAILED: {exc}"))
        return
    if result == "locked":
        report.diffs.append(Diff(DiffKind.LOCKED, did, f"AHEAD left to its worker: {detail}",
                                 held=DiffKind.AHEAD))
        return
    by_seq = {int(x.get("seq", "0") or 0): x for x in entries}
    state = esc
    now = scheduler.time()
    try:
        for seq in range(esc.seq + 1, max(top, esc.seq + 1) + 1):
            entry = by_seq.get(seq)
            lost: dict[str, Any] = ({k: str(entry[k]) for k in _LOST_FIELDS if k in entry}
                                    if entry is not None else {"seq": str(seq)})
            state = ledger.append_event(LedgerEvent(
                esc.dispute_id, SCHEDULE_RESET, REDIS_AHEAD, ahead.actor, now, {},
                {"recovery": "redis_ahead_of_ledger", "ledger_seq": esc.seq,
                 "redis_seq": top, "lost_decision": lost,
                 "notified": entry is not None},
                expected_seq=state.seq))
    except ITEM_ERRORS as exc:  # ConflictError, NotFound among them
        # Redis no longer holds the member: the next run finds it missing, with the same
        # later review-stream entries, and goes on from the ledger's seq
        report.errors.append((did, f"AHEAD: {exc}"))
        report.diffs.append(Diff(DiffKind.AHEAD, did, f"{detail}: FAILED: {exc}"))
        return
    try:
        _restore(scheduler, [(state, DiffKind.AHEAD, f"{detail}; reset to seq {state.seq}")],
                 report, None, restored)
    except ITEM_ERRORS as exc:
        report.errors.append((did, f"AHEAD: {exc}"))
        report.diffs.append(Diff(DiffKind.AHEAD, did, f"{detail}: FAILED: {exc}"))


def _repair_notes(store: PendingSource | None, redis_side: SchedulerInspection,
                  gaps: Sequence[tuple[DiffKind, tuple[UUID, int, int]]],
                  ) -> dict[UUID, dict[str, str]]:
    """Entries to send with the BEHIND and MISSING repairs, by dispute id; ``gaps``:
    (kind, (dispute id, payload seq or 0, PostgreSQL seq))."""
    if store is None:
        return {}
    notes = unapplied_notifications(store, [r for k, r in gaps if k is DiffKind.BEHIND])
    missing = [r for k, r in gaps if k is DiffKind.MISSING]
    if missing:
        notes.update(lost_notifications(store, redis_side, missing))
    return notes


def _remove_after_lost_apply(
    done: dict[str, Escalation], scheduler: Scheduler, store: PendingSource,
    redis_side: SchedulerInspection, report: ReconcileReport,
) -> set[str]:
    """Terminal / cancelled members whose payload is behind PostgreSQL with a decision in
    between (its apply, and so its notification, was lost: worker killed after the record,
    or a failover): removed by an owner-less apply that sends that decision's entry
    (seq-guarded: at most once). Returns the members handled here (the others go to
    ``reconcile_remove.lua``)."""
    seen = redis_side.inspect(list(done))
    ranges = [(esc.dispute_id, got.payload_seq, esc.seq) for m, esc in done.items()
              if (got := seen[m]).payload_seq is not None and not got.locked
              and got.payload_seq < esc.seq]
    notes = unapplied_notifications(store, ranges)
    handled: set[str] = set()
    for member, esc in done.items():
        if esc.dispute_id not in notes:
            continue
        handled.add(member)
        status = esc.status.value
        try:
            outcome = scheduler.restore([esc], {esc.dispute_id: notes[esc.dispute_id]})[0]
        except ITEM_ERRORS as exc:
            report.errors.append((member, f"{DiffKind.TERMINAL_MEMBER.value}: {exc}"))
            report.diffs.append(Diff(DiffKind.TERMINAL_MEMBER, member,
                                     f"PostgreSQL: {status}; FAILED: {exc}"))
            continue
        report.diffs.append(Diff(
            DiffKind.TERMINAL_MEMBER, member,
            f"PostgreSQL: {status}; unapplied decision seq {esc.seq}: {outcome.value}",
            repaired=outcome is ApplyOutcome.APPLIED))
    return handled


def _redis_to_db(members: list[str], store: PendingSource, run: _Run) -> list[str]:
    """Pass 2 for one chunk of members. Returns the members the ledger does not know (each
    removed as UNKNOWN_MEMBER, or listed by a dry run)."""
    scheduler, redis_side = run.scheduler, run.redis_side
    report, dry_run = run.report, run.dry_run
    ids: dict[str, UUID | None] = {}
    for m in members:
        try:
            ids[m] = parse_dispute_id(m)
        except EscalationError:
            ids[m] = None
    known = store.get_many([u for u in ids.values() if u is not None])
    handled: set[str] = set()
    if not dry_run and scheduler is not None:
        done = {m: e for m, u in ids.items() if u is not None and (e := known.get(u)) is not None
                and e.status in ENDED}
        if done:
            handled = _remove_after_lost_apply(done, scheduler, store, redis_side, report)
    for member, uid in ids.items():
        if member in handled:
            continue
        esc = known.get(uid) if uid is not None else None
        if esc is None:
            kind, seq, mode = DiffKind.UNKNOWN_MEMBER, None, "remove"
        elif esc.status in ENDED:
            kind, seq, mode = DiffKind.TERMINAL_MEMBER, esc.seq, "remove"
        elif esc.status is Status.PAUSED:
            kind, seq, mode = DiffKind.PAUSED_MEMBER, esc.seq, "unpark"
        else:
            continue
        status = "unknown" if esc is None else esc.status.value
        if dry_run:
            report.diffs.append(Diff(kind, member, f"PostgreSQL: {status}"))
            continue
        try:
            result = redis_side.remove_member(member, seq, mode)
        except ITEM_ERRORS as exc:
            report.errors.append((member, f"{kind.value}: {exc}"))
            report.diffs.append(Diff(kind, member, f"PostgreSQL: {status}; FAILED: {exc}"))
            continue
        report.diffs.append(Diff(kind, member, f"PostgreSQL: {status}; {result}",
                                 repaired=result == "removed"))
    return [m for m, u in ids.items() if u is not None and u not in known]
