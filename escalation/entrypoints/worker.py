"""The worker loop: fire batches, sleep until the earliest due time (or the jittered poll
interval), wake early when an earlier escalation is enqueued, stop cleanly on SIGTERM/SIGINT.

Sleep (docs/operations.md, the scheduler table): ``poll_interval_s * (1 + U(-jitter, +jitter))``,
shortened to the earliest pending due time read from the ZSET. A full batch is followed by
the next one at once. SIGTERM/SIGINT during a batch let the batch finish (record + apply),
then the worker exits 0; during a sleep they end it at once.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import random
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from types import FrameType
from typing import TYPE_CHECKING, Any

import sqlalchemy.exc

from escalation.bootstrap import (
    REDIS_OUTAGE_ERRORS,
    App,
    database_writable_for,
    dead_letters_for,
    drop_redis_connections,
    maintenance_for,
    namespace_binding_for,
    schedule_for,
    stats_counter_for,
    warnings_for,
)
from escalation.domain.errors import DatabaseReadOnly, EscalationError
from escalation.domain.escalation import Escalation
from escalation.logs import get_logger
from escalation.ports import ResyncMark, StatsCounter, WarningMember, WarningQueue
from escalation.service_layer.core import CorePorts
from escalation.service_layer.dead_letters import DeadLetters
from escalation.service_layer.fire import BatchReport, FireDue, FiringHooks, fire_due
from escalation.service_layer.maintenance import poll_safely as poll_maintenance
from escalation.service_layer.warnings import (
    FireWarnings,
    WarningPorts,
    fire_warnings,
    warning_members,
)

if TYPE_CHECKING:  # prometheus_client: imported only by a worker given --metrics-port
    from escalation.entrypoints.worker_metrics import WorkerMetrics

log = get_logger("escalation.worker")

MAX_BACKOFF_S = 30.0  # --burst only: the blind back-off between two attempts, at most
BURST_MAX_FAILURES = 5  # --burst gives up after this many consecutive outages (~15 s)
OUTAGE_PROBE_EVERY_S = 1.0  # during an outage: one cheap probe of both servers this often
OUTAGE_LOG_EVERY_S = 30.0  # while an outage lasts: one worker.outage_continues line this often


class OutageCause(StrEnum):
    """What a worker's outage back-off waits for: the ``reason`` code of its
    ``worker.backoff`` / ``worker.outage_continues`` / ``worker.outage_ended`` lines."""

    REDIS_UNREACHABLE = "redis_unreachable"  # connection lost or timed out, no primary
    DATABASE_UNREACHABLE = "database_unreachable"  # PostgreSQL does not answer


@dataclass
class _Outage:
    """One outage as the worker sees it (host monotonic clock, seconds)."""

    cause: OutageCause
    since: float  # when the first failed call of the outage was seen
    logged: float  # when the last line about it was written
    attempts: int = 0  # failed passes and probes so far
    error: str = ""  # the latest error, first 300 characters


RESYNC_CHECK_EVERY_S = 1.0  # how often a firing worker reads the namespace's resync mark
RESYNC_COMMAND = "escalation reconcile"


class RedisAheadOfLedger(EscalationError):
    """The namespace is marked for a resync (Redis may be ahead of the ledger: a restore,
    a failover that lost commits; ADR 0014): a ``--burst`` worker refuses to fire it and
    exits 1 with this one line; a long-running worker waits instead."""


class _Shutdown(BaseException):
    """Raised from the signal handler to break out of a blocking wait (only while the
    worker waits: see :func:`_install_stop_handlers`). A BaseException, so that no
    ``except Exception`` on the way (a maintenance job's, a retry loop's) swallows it."""


@dataclass
class WorkerTotals:
    """Totals over a worker's life (printed by ``--burst``)."""

    batches: int = 0
    claimed: int = 0
    recorded: int = 0
    stale: int = 0
    stuck: int = 0
    poison: int = 0
    warnings: int = 0
    """Pre-breach warnings recorded (``SLA_WARNING_*`` ledger rows)."""


def _emit(event: str, level: str = "info", **fields: Any) -> None:
    getattr(log, level)(event, **fields)


class _BatchEmit:
    """:func:`_emit` for one batch: the structlog logger is bound once, at the first event.

    ``log`` is structlog's lazy proxy, which builds a new bound logger (and a new write
    logger) on every call -- about 3.5 us per event, one event per decision at DEBUG or with
    ``--metrics-port``. The bound logger is the one the proxy builds, from the configuration
    current at the batch's first event, so the lines are the same; a reconfiguration takes
    effect from the next batch.
    """

    __slots__ = ("_bound",)

    def __init__(self) -> None:
        self._bound: Any = None

    def __call__(self, event: str, level: str = "info", **fields: Any) -> None:
        bound = self._bound
        if bound is None:
            bound = self._bound = log.bind()
        getattr(bound, level)(event, **fields)


def sleep_seconds(
    poll_interval_s: float, jitter: float, now_ms: int, next_due_ms: int | None,
    rng: random.Random,
) -> float:
    """Seconds to sleep: jittered poll interval, capped by the time until ``next_due_ms``.

    ``poll_interval_s * (1 + U(-jitter, +jitter))`` (docs/operations.md); never negative.
    """
    base = poll_interval_s * (1 + rng.uniform(-jitter, jitter))
    if next_due_ms is not None:
        base = min(base, max(0.0, (next_due_ms - now_ms) / 1000.0))
    return max(0.0, base)


MAINTENANCE_EVERY_S = 30.0  # maintenance lease poll at most this often (idle cost)


def maintenance_every_s(lease_ttl_ms: int, margin: float) -> float:
    """Seconds between two maintenance polls: ``MAINTENANCE_EVERY_S`` (30 s), shortened to
    half of the leader's valid window (``ttl * (1 - margin) / 2``) so a leader renews its
    lease well before it stops acting (lease 90 s at the default lock_ttl_s 30: 30 s)."""
    return max(0.5, min(MAINTENANCE_EVERY_S, lease_ttl_ms / 1000.0 * (1.0 - margin) / 2.0))


def _earliest(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


@dataclass
class _IdleState:
    """What lets an idle worker skip work (docs/performance.md, "Idle worker").

    * warnings pass: runs only when the earliest warning left by the previous pass
      (``warn_next_ms``, from warn_claim.lua) is due, or after a wake marker (``woke``;
      ``RedisWarnings.schedule`` pushes one when it adds a new earliest warning). The first
      loop runs it (``woke`` starts True).
    * maintenance: polled at most every ``maint_every_s`` seconds (host monotonic clock),
      the first time one interval after start: a worker (re)started into a backlog fires
      first; a missed run is still caught up within ``maint_every_s``. ``--burst`` workers
      (drain and exit) run no maintenance at all.
    """

    maint_every_s: float
    woke: bool = True
    warn_next_ms: int | None = None
    maint_next: float = 0.0

    def warnings_due(self, now_ms: int) -> bool:
        """True when the warnings pass should run now (``now_ms``: Redis time, epoch ms)."""
        return self.woke or (self.warn_next_ms is not None and self.warn_next_ms <= now_ms)

    def warned(self, next_ms: int | None) -> None:
        """Record a finished warnings pass and the earliest warning it left."""
        self.woke, self.warn_next_ms = False, next_ms

    def maintenance_due(self) -> bool:
        """True (and the next poll scheduled) when maintenance should be polled now."""
        now = time.monotonic()
        if now < self.maint_next:
            return False
        self.maint_next = now + self.maint_every_s
        return True


def crashpoint_from_env() -> Callable[[str], None] | None:
    """Test hook: ``ESCALATION_CRASHPOINT=<name>:<n>`` SIGKILLs this process the n-th time the
    protocol passes boundary ``<name>`` (after_claim, before_record, after_record, after_apply).
    Unset = no-op.
    Used by the fault-injection tests only."""
    spec = os.environ.get("ESCALATION_CRASHPOINT")
    if not spec:
        return None
    name, _, count = spec.partition(":")
    seen = {"n": 0}
    target = int(count or "1")

    def hook(point: str) -> None:
        if point == name:
            seen["n"] += 1
            if seen["n"] >= target:
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


_EARLY_STOP: dict[str, int | None] = {"signum": None, "abort": 0}


class StoppedDuringStartup(BaseException):
    """A stop signal (SIGTERM/SIGINT) came while the worker was still starting (connecting,
    start-up retries, the schema and ladder checks): nothing was claimed yet, so start-up is
    abandoned at once and the process exits 0. A BaseException, like KeyboardInterrupt, so
    that no retry loop takes it for a failure to retry. ``args[0]``: the signal's name."""

    def log(self) -> None:
        """Log ``worker.stopped_during_startup`` with the signal's name."""
        log.info("worker.stopped_during_startup", signal=self.args[0])


def install_early_stop_handlers() -> None:
    """Catch SIGTERM/SIGINT from process start until :func:`run_worker` takes over.

    A stop signal while start-up runs raises :class:`StoppedDuringStartup` where the process
    is (a connect or a start-up retry wait included: an orchestrator's stop is not held up
    by ``startup_timeout_s``); the ``worker`` command exits 0. Once
    :func:`startup_finished` has been called, a signal is only remembered, and
    ``run_worker`` honours it before its first claim.
    """

    def early(signum: int, frame: FrameType | None) -> None:
        _EARLY_STOP["signum"] = signum
        if _EARLY_STOP["abort"]:
            _EARLY_STOP["abort"] = 0  # raised once: clean-up code runs undisturbed
            raise StoppedDuringStartup(signal.Signals(signum).name)

    _EARLY_STOP["abort"] = 1
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, early)


def startup_finished() -> None:
    """From now on an early stop signal is remembered for ``run_worker``, not raised."""
    _EARLY_STOP["abort"] = 0


#: Outages retried with backoff: PostgreSQL away, Redis away (incl. a Cluster or Sentinel
#: failover: no primary for a slot, a write to a demoted primary), PostgreSQL read-only (a
#: hot standby, a failover's read-only window).
_OUTAGES: tuple[type[Exception], ...] = (
    sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError, DatabaseReadOnly,
    *REDIS_OUTAGE_ERRORS)


def settle_heap() -> None:
    """Tune the cyclic garbage collector for a worker process (``escalation worker`` calls
    it once, after wiring and before :func:`run_worker`; tests running ``run_worker`` in
    their own process do not).

    ``gc.freeze()``: modules, SQLAlchemy metadata, the ladder catalog and the pools (~120,000
    objects, alive as long as the process) leave the collector's view; every full collection
    walked all of them again. Young-generation threshold 100,000 (default 700): a drain
    allocates per batch objects that live across young collections (the 500 claimed
    escalations, ledger rows, script replies), which were promoted and then walked by full
    collections every few batches. Measured with ``gc.callbacks`` over a 10,000-escalation
    drain: ~0.5 s of collector time before, ~0.02 s after. Reference counting still frees
    everything acyclic at once; cyclic garbage waits for at most 100,000 allocations. Frozen
    objects are never collected: only what exists at start-up is frozen, once.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 10, 10)


def run_worker(app: App, *, burst: bool = False, max_batches: int | None = None,
               metrics: WorkerMetrics | None = None) -> WorkerTotals:
    """Run until SIGTERM/SIGINT (or, with ``burst``, until nothing is due). Returns totals.

    Database or Redis outages: one ``worker.backoff`` line when an outage begins, one
    ``worker.outage_continues`` every ``OUTAGE_LOG_EVERY_S`` while it lasts and one
    ``worker.outage_ended`` when a pass succeeds again (no traceback); meanwhile both servers
    are probed every ``OUTAGE_PROBE_EVERY_S`` (:func:`_outage_wait`), so the worker resumes
    within about a second of the servers answering, however long the outage was. A
    ``--burst`` run backs off blindly (0.5 s doubling) and gives up after
    ``BURST_MAX_FAILURES`` outages in a row. Members claimed before the failure come due
    again after their lease, so nothing is lost. ``metrics`` (optional) observes every
    batch and decision (``escalation worker --metrics-port``).
    """
    settings = app.settings
    rng = random.Random()
    totals = WorkerTotals()
    failures = 0
    hook = crashpoint_from_env()
    warn_adapter, warn_schedule = warnings_for(app), schedule_for(app)  # pre-breach warnings
    state = {"stop": _EARLY_STOP["signum"] is not None, "in_batch": False, "waiting": False}
    maint = maintenance_for(app, stop_check=partial(_stop_between_pages, state))
    dead = dead_letters_for(app)  # the poison hook: dead letters
    idle = _IdleState(maint_every_s=maintenance_every_s(maint.lease.ttl_ms, maint.lease.margin))
    idle.maint_next = time.monotonic() + idle.maint_every_s
    ctx = _Pass(app=app, crashpoint=hook, warn_adapter=warn_adapter, warn_schedule=warn_schedule,
                stats=stats_counter_for(app),
                warn_members=partial(warning_members, ladders=app.ladders,
                                     calendars=app.calendars),
                dead=dead, idle=idle, metrics=metrics,
                # the worker's command, the same for every pass: the per-decision events
                # feed the DEBUG log and the metrics (lag histogram)
                fire=FireDue(batch_size=settings.batch_size, lease_ms=settings.lease_ms,
                             worker_id=app.actor,
                             decision_events=str(settings.log_level).upper() == "DEBUG"
                             or metrics is not None),
                resync=namespace_binding_for(app), burst=burst,
                writable=database_writable_for(app))
    # Wired first, then the handlers and at once the try: a stop signal right after
    # "worker.started" (which is what the demo waits for) ends the loop cleanly (exit 0).
    old = _install_stop_handlers(state, app.actor)
    # SIGUSR1 writes every thread's Python stack to stderr and the worker goes on: what an
    # operator (or a test) reads when a worker seems stuck
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    try:
        log.info("worker.started", worker_id=app.actor, batch_size=settings.batch_size,
                 lock_ttl_s=settings.lock_ttl_s, poll_interval_s=settings.poll_interval_s,
                 jitter=settings.jitter, burst=burst)
        while not state["stop"]:
            state["in_batch"] = True
            try:
                report, now_ms = _fire_pass(ctx)
                passed_at = time.monotonic()  # now_ms ages from here (maintenance below)
                state["in_batch"] = False
                failures = 0
                _outage_ended(ctx)  # logs only when an outage was open
                _add(totals, report)
                totals.warnings = ctx.warnings_recorded
                if not burst and idle.maintenance_due():
                    poll_maintenance(maint)  # every maint_every_s at most (idle cost)
                if state["stop"] or (max_batches is not None and totals.batches >= max_batches):
                    break
                step = _next_step(report, now_ms, burst=burst, batch_size=settings.batch_size)
                if step == "again":
                    continue  # backlog, or something moved: look again before sleeping
                if step == "drained":
                    break
                _waiting(state, partial(_idle_wait, ctx, report, now_ms, rng, passed_at))
                failures = 0
            except _OUTAGES as exc:
                failures += 1
                state["in_batch"] = False
                delay = _backoff(ctx, exc, failures, rng)
                if burst and failures >= BURST_MAX_FAILURES:
                    raise  # a drain-and-exit run gives up; the CLI prints one error line
                if state["stop"]:
                    break
                _waiting(state, _pause(ctx, delay, rng, burst=burst))
                continue
            finally:
                state["in_batch"] = False
    except _Shutdown:
        # the wait's command was cut off mid-reply: drop the pooled connections so that
        # the lease release below cannot read that stale reply as its own
        drop_redis_connections(app)
    except MaintenanceStopped:
        log.info("worker.maintenance_cut_short", worker_id=app.actor,
                 reason="stop requested during reconcile; the next run repairs the rest")
    finally:
        maint.lease.release()  # hand the maintenance lease over at once
        _restore_handlers(old)
    log.info("worker.stopped", worker_id=app.actor, **totals.__dict__)
    return totals


@dataclass
class _Pass:
    """What one pass of the worker loop works with (wired once by :func:`run_worker`)."""

    app: App
    fire: FireDue  # the command of every pass's ``fire_due``
    crashpoint: Callable[[str], None] | None  # test hook (ESCALATION_CRASHPOINT)
    warn_adapter: WarningQueue
    warn_schedule: Callable[[Sequence[Escalation]], object]
    # escalations -> their pre-breach warnings (sent with the apply call)
    warn_members: Callable[[Sequence[Escalation]], list[WarningMember]]
    dead: DeadLetters
    idle: _IdleState
    stats: StatsCounter  # the namespace's counters read by /metrics
    resync: ResyncMark  # the namespace's resync mark (ADR 0014)
    metrics: WorkerMetrics | None = None
    resync_next: float = 0.0  # monotonic time of the next read of the mark
    refusing: bool = False  # the last read found the mark set
    burst: bool = False  # a --burst run raises RedisAheadOfLedger instead of waiting
    writable: Callable[[], bool] | None = None  # probe: the database accepts writes
    read_only: bool = False  # the last write or probe found the database read-only
    outage: _Outage | None = None  # Redis or PostgreSQL unreachable since the last good pass
    warnings_recorded: int = 0  # pre-breach warnings recorded by this worker's passes


def _fire_pass(ctx: _Pass) -> tuple[BatchReport, int]:
    """Fire one batch of due escalations, then the pre-breach warnings when one is due (or
    after a wake). Returns the batch report and the Redis time of the claim (epoch ms, 0 when
    nothing was claimed). Redis/PostgreSQL outages propagate to the loop's backoff. While
    the namespace's resync mark is set nothing is claimed (an empty report).
    ``ctx.metrics`` (``--metrics-port``) observes every decision event, whatever the log
    level, and the batch."""
    app, metrics = ctx.app, ctx.metrics
    if ctx.read_only:
        _check_writable(ctx)  # claims nothing until a writable primary answers
    if _refuses_namespace(ctx, burst=ctx.burst):  # Redis ahead of the ledger (ADR 0014)
        return BatchReport(), 0  # nothing claimed: the loop sleeps a poll interval
    started = time.monotonic()
    emit = _BatchEmit()
    report = fire_due(
        ctx.fire,
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
        FiringHooks(emit=emit if metrics is None else metrics.sink(emit, started),
                    crashpoint=ctx.crashpoint,
                    # poison -> dead letter (docs/reliability.md)
                    on_poison=ctx.dead.on_decision_failed,
                    on_scheduled=ctx.warn_schedule,
                    warning_members=ctx.warn_members),  # scheduled by the apply script itself
    )
    if report.ahead:  # Redis ahead of the ledger: every worker stops firing (ADR 0014)
        _mark_ahead(ctx, report.ahead)
    if report.lease_expired:  # read by the API's /metrics (Redis stats)
        ctx.stats.add("lease_expired", report.lease_expired)
    if metrics is not None:
        metrics.batch(report)
    now_ms = int(report.now.timestamp() * 1000) if report.now else 0
    if ctx.idle.warnings_due(now_ms):
        # pre-breach warnings: only when one is due or after a wake (idle cost)
        wrep = fire_warnings(
            FireWarnings(app.actor, ctx.fire.batch_size),
            WarningPorts(ctx.warn_adapter, app.scheduler, app.store, app.ladders,
                         app.calendars), _emit)
        ctx.idle.warned(wrep.next_due_ms)
        ctx.warnings_recorded += wrep.recorded
    return report, now_ms


def _refuses_namespace(ctx: _Pass, *, burst: bool) -> bool:
    """True while the namespace's resync mark is set (read at most every
    ``RESYNC_CHECK_EVERY_S``, at once after a batch found Redis ahead): the worker fires
    nothing, logs ``worker.redis_ahead`` (ERROR, with the command to run) when it starts
    refusing and ``worker.redis_ahead_cleared`` when the mark is gone. Redis outages while
    reading it propagate to the loop's back-off.

    Raises:
        RedisAheadOfLedger: with ``burst``, instead of waiting.
    """
    now = time.monotonic()
    if now < ctx.resync_next:
        return ctx.refusing
    ctx.resync_next = now + RESYNC_CHECK_EVERY_S
    mark = ctx.resync.resync()
    was, ctx.refusing = ctx.refusing, mark is not None
    if mark is not None and not was:
        log.error("worker.redis_ahead", worker_id=ctx.app.actor,
                  namespace=ctx.app.settings.namespace, reason=mark.get("reason"),
                  since_ms=mark.get("since_ms"), detail=mark.get("detail"),
                  match_decision="REDIS_AHEAD", command=RESYNC_COMMAND,
                  message="Redis may be ahead of the ledger (a restore or a failover that "
                          "lost commits): this worker fires nothing until "
                          f"`{RESYNC_COMMAND}` has reset Redis to the ledger")
    elif mark is None and was:
        ctx.idle.woke = True  # look at everything again
        log.warning("worker.redis_ahead_cleared", worker_id=ctx.app.actor,
                    namespace=ctx.app.settings.namespace)
    if mark is not None and burst:
        raise RedisAheadOfLedger(
            f"namespace {ctx.app.settings.namespace!r} is marked for a resync "
            f"({mark.get('reason')}: {mark.get('detail')}): Redis may be ahead of the "
            f"ledger; run `{RESYNC_COMMAND}`, then the worker again")
    return ctx.refusing


def _check_writable(ctx: _Pass) -> None:
    """After a read-only refusal: probe the database (one round trip, nothing written) before
    claiming anything. Still read-only: raise :class:`DatabaseReadOnly` (the loop backs off,
    nothing claimed, nothing logged again); writable: log ``worker.database_writable`` once
    and go on."""
    if ctx.writable is not None and not ctx.writable():
        raise DatabaseReadOnly("the database is still read-only")
    ctx.read_only = False
    ctx.idle.woke = True  # look at everything again
    log.warning("worker.database_writable", worker_id=ctx.app.actor,
                match_decision="DATABASE_WRITABLE")


def _mark_ahead(ctx: _Pass, ahead: list[str]) -> None:
    """A batch claimed escalations whose Redis payload is ahead of the ledger: mark the
    namespace for a resync (every worker stops firing it) and read the mark again now."""
    ctx.resync.mark_resync("ahead_on_claim",
                           f"worker {ctx.app.actor} claimed {len(ahead)} escalation(s) "
                           f"ahead of the ledger, e.g. {ahead[:5]}")
    ctx.resync_next = 0.0


def _next_step(report: BatchReport, now_ms: int, *, burst: bool, batch_size: int) -> str:
    """After a batch: ``"again"`` when something was claimed or repaired (a backlog: look
    again before sleeping), ``"drained"`` when a ``--burst`` run has nothing due at
    ``now_ms`` (epoch ms), else ``"sleep"``."""
    if report.claimed >= batch_size or report.claimed or report.stuck:
        return "again"
    if burst and (report.next_due_ms is None or report.next_due_ms > now_ms):
        return "drained"
    return "sleep"


def _idle_wait(ctx: _Pass, report: BatchReport, now_ms: int, rng: random.Random,
               passed_at: float | None = None) -> None:
    """Sleep the jittered poll interval, cut short by the next due escalation or warning
    or by a wake marker (which makes the next pass run the warnings).

    ``now_ms``: the Redis time of the pass's claim (epoch ms), read at ``passed_at`` (host
    monotonic seconds); the time spent since (a maintenance run of the leader: a reconcile
    took 0.7 s on a small test database) is added, so the wait ends at the next due time and
    not that much after it. Without it, a leader whose maintenance ran just before a frozen
    worker's lease ended took that batch over a whole maintenance run late.
    """
    settings, idle = ctx.app.settings, ctx.idle
    if passed_at is not None and now_ms:
        now_ms += int((time.monotonic() - passed_at) * 1000)
    wait = sleep_seconds(settings.poll_interval_s, settings.jitter, now_ms,
                         _earliest(report.next_due_ms, idle.warn_next_ms), rng)
    if wait > 0:
        idle.woke = ctx.app.scheduler.wait_for_wake(wait)


class MaintenanceStopped(BaseException):
    """Raised between two reconcile pages when a stop was asked for (no client call is in
    flight there, unlike :class:`_Shutdown`): a long reconcile over a large ledger does not
    hold a stopping worker for minutes. A BaseException so no job's ``except Exception``
    swallows it."""


def _stop_between_pages(state: dict[str, bool]) -> None:
    """The maintenance's stop check: raise :class:`MaintenanceStopped` once a stop signal
    has set ``state["stop"]``."""
    if state["stop"]:
        raise MaintenanceStopped


def _waiting(state: dict[str, bool], wait: Callable[[], None]) -> None:
    """Run ``wait`` (the idle wait or an outage back-off) as the one place a stop signal
    may interrupt (``state["waiting"]``); a signal that came just before it skips it."""
    state["waiting"] = True
    try:
        if not state["stop"]:
            wait()
    finally:
        state["waiting"] = False


def _install_stop_handlers(state: dict[str, bool], actor: str) -> dict[int, Any]:
    """Handle SIGTERM/SIGINT for :func:`run_worker`: set ``state["stop"]``, and interrupt
    the worker only while it waits (``state["waiting"]``: the idle wait, an outage back-off)
    by raising ``_Shutdown``. Anywhere else (a batch, a maintenance job, a Redis or
    PostgreSQL call) the flag alone stops the loop when that work is done: an exception
    raised in the middle of a client call could leave a reply unread on a pooled
    connection, which the next command would then take for its own. Returns the previous
    handlers for :func:`_restore_handlers`."""

    def handler(signum: int, frame: FrameType | None) -> None:
        state["stop"] = True
        log.info("worker.stopping", signal=signal.Signals(signum).name, worker_id=actor)
        if state.get("waiting"):
            raise _Shutdown

    return {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}


def _restore_handlers(old: dict[int, Any]) -> None:
    """Put back the signal handlers :func:`_install_stop_handlers` replaced."""
    for s, h in old.items():
        signal.signal(s, h)


def _backoff(ctx: _Pass, exc: Exception, failures: int, rng: random.Random) -> float:
    """Note the ``failures``-th consecutive failed pass and return the blind delay in
    seconds a ``--burst`` run (or a read-only database, :func:`_read_only_backoff`) sleeps:
    0.5 s doubling, capped at ``MAX_BACKOFF_S``, jittered 0.8-1.2x. An unreachable server
    opens or continues ``ctx.outage`` (:func:`_outage_seen`: one log line per state change);
    a long-running worker then waits in :func:`_outage_wait` instead of sleeping the delay.
    The next pass looks at everything again (warnings included)."""
    ctx.idle.woke = True  # after an outage, look at everything again
    delay: float = min(MAX_BACKOFF_S, 0.5 * 2 ** min(failures, 8)) * rng.uniform(0.8, 1.2)
    if isinstance(exc, DatabaseReadOnly):
        return _read_only_backoff(ctx, exc, delay)
    _outage_seen(ctx, exc)
    return delay


def _pause(ctx: _Pass, delay: float, rng: random.Random, *, burst: bool,
           ) -> Callable[[], None]:
    """The wait after a failed pass: the blind ``delay`` (seconds) for a ``--burst`` run or a
    read-only database (no open ``ctx.outage``), else probing until the servers answer
    (:func:`_outage_wait`)."""
    if burst or ctx.outage is None:
        return partial(time.sleep, delay)
    return partial(_outage_wait, ctx, rng)


def _outage_cause(exc: Exception) -> OutageCause:
    """The :class:`OutageCause` of an outage error, by exception type (never by message)."""
    if isinstance(exc, REDIS_OUTAGE_ERRORS):
        return OutageCause.REDIS_UNREACHABLE
    return OutageCause.DATABASE_UNREACHABLE


def _outage_seen(ctx: _Pass, exc: Exception) -> None:
    """A pass or a probe failed with ``exc``: open ``ctx.outage`` (``worker.backoff``, one
    WARNING line, no traceback) or, when the cause changed (Redis back, PostgreSQL still
    away), log ``worker.backoff`` again; otherwise count the attempt and write one
    ``worker.outage_continues`` line every ``OUTAGE_LOG_EVERY_S`` seconds at most."""
    now, cause, error = time.monotonic(), _outage_cause(exc), str(exc)[:300]
    outage = ctx.outage
    if outage is None or outage.cause is not cause:
        since = now if outage is None else outage.since
        ctx.outage = _Outage(cause=cause, since=since, logged=now, attempts=1, error=error)
        log.warning("worker.backoff", worker_id=ctx.app.actor, reason=cause.value,
                    error=error, down_s=round(now - since, 1),
                    probe_every_s=OUTAGE_PROBE_EVERY_S,
                    message="a server does not answer: probing it every "
                            f"{OUTAGE_PROBE_EVERY_S:g} s, the worker resumes when it answers")
        return
    outage.attempts += 1
    outage.error = error
    if now - outage.logged >= OUTAGE_LOG_EVERY_S:
        outage.logged = now
        log.warning("worker.outage_continues", worker_id=ctx.app.actor,
                    reason=cause.value, error=error, down_s=round(now - outage.since, 1),
                    attempts=outage.attempts)


def _outage_ended(ctx: _Pass) -> None:
    """A pass succeeded after an outage: log ``worker.outage_ended`` (how long, how many
    failed attempts) and close ``ctx.outage``."""
    outage, ctx.outage = ctx.outage, None
    if outage is not None:
        log.warning("worker.outage_ended", worker_id=ctx.app.actor, reason=outage.cause.value,
                    down_s=round(time.monotonic() - outage.since, 1), attempts=outage.attempts)


def _servers_answer(ctx: _Pass) -> bool:
    """One cheap probe of both servers: Redis ``TIME`` (through the scheduler) and one
    PostgreSQL round trip (the writability probe; a read-only answer counts as an answer: the
    next pass takes the read-only path). Each call is bounded by ``Settings.io_timeout_s``.
    False, with the failure noted in ``ctx.outage``, when either does not answer."""
    try:
        ctx.app.scheduler.time()
        if ctx.writable is not None:
            ctx.writable()
    except _OUTAGES as exc:
        _outage_seen(ctx, exc)
        return False
    return True


def _outage_wait(ctx: _Pass, rng: random.Random,
                 sleep: Callable[[float], None] = time.sleep) -> None:
    """The back-off of a long-running worker during an outage: sleep
    ``OUTAGE_PROBE_EVERY_S`` (jittered 0.8-1.2x, so workers do not probe in step), probe both
    servers (:func:`_servers_answer`), and return as soon as both answer. A fixed probe
    interval instead of a growing blind sleep: after an outage of any length the worker
    resumes within one probe interval plus one bounded probe of the network's return (an
    exponential back-off capped at 30 s left workers idle up to 30 s after the servers were
    back, past lease + poll interval; docs/adr/0022-outage-back-off-probes.md). Ends early
    on a stop signal (the caller's :func:`_waiting`)."""
    while True:
        sleep(OUTAGE_PROBE_EVERY_S * rng.uniform(0.8, 1.2))
        if _servers_answer(ctx):
            return


def _read_only_backoff(ctx: _Pass, exc: DatabaseReadOnly, delay: float) -> float:
    """The back-off while the database is read-only: one ``worker.database_read_only``
    line when the state begins (none per attempt, no traceback), then a cheap writability
    probe every poll interval at most (:func:`_check_writable`), so the worker resumes
    within one poll interval of a writable primary answering."""
    if not ctx.read_only:
        ctx.read_only = True
        log.warning("worker.database_read_only", worker_id=ctx.app.actor, error=str(exc),
                    match_decision="DATABASE_READ_ONLY",
                    message="PostgreSQL refuses writes (a hot standby, or a failover in "
                            "progress): nothing is claimed until a writable primary answers")
    return min(delay, float(ctx.app.settings.poll_interval_s))


def _add(totals: WorkerTotals, report: BatchReport) -> None:
    totals.batches += 1
    totals.claimed += report.claimed
    totals.recorded += report.recorded
    totals.stale += report.stale
    totals.stuck += report.stuck
    totals.poison += report.poison
