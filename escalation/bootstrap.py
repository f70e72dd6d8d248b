"""Wiring: turn :class:`Settings` into the object graph (no globals, nothing at import time).

``build(settings)`` resolves the server URLs (configured ones, or the embedded Valkey and
PostgreSQL under ``settings.home``), creates the Redis client, the SQLAlchemy engine, the
scheduler, the audit store, the ladder catalog and the calendars. The ``*_for(app)``
functions wire the worker's other use cases (warnings, dead letters, maintenance) to the
adapters of an App: the one place where service-layer objects meet adapters.
"""

from __future__ import annotations

import os
import random
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
import sqlalchemy as sa

# Imported here: what build() wires, which every command that builds an App needs (the
# audit store, the largest, and the ladder history, which builds its ledger rows with the
# audit store's helpers, are imported by build() itself: `db upgrade` builds no App). The
# adapters and use cases of one command or one worker task are imported inside the
# ``*_for`` function that wires them, so a command loads only its own
# (docs/performance.md, "CLI start-up"; tests/integration/test_cli_imports.py holds it).
from escalation.adapters.calendar_files import load_institution_calendars
from escalation.adapters.db import (
    bind_namespace,
    check_at_head,
    check_namespace,
    database_identity,
    make_engine,
    normalize_url,
    upgrade_to_head,
)
from escalation.adapters.ladder_files import (
    LadderCatalog,
    ReleasedLadders,
    check_ladder_dir_with_history,
)
from escalation.adapters.redis_client import (
    OUTAGE_ERRORS,
    NamespaceBinding,
    make_redis,
    ping_checked,
)
from escalation.adapters.redis_layout import check_shard_count
from escalation.adapters.redis_scheduler import RedisScheduler
from escalation.domain.errors import (
    ConfigError,
    ErrorCode,
    LadderError,
    LadderProblem,
    SchemaNotAtHead,
)
from escalation.domain.timeutil import from_ms
from escalation.logs import get_logger
from escalation.service_layer.doctor import DEFAULT_MAX_SKEW_MS
from escalation.service_layer.ladder_release import baseline_releases
from escalation.service_layer.priority import weight_fn

if TYPE_CHECKING:
    from escalation.adapters.audit_store import PostgresAuditStore
    from escalation.adapters.console_ops import ConsoleOpsStore
    from escalation.adapters.ladder_history import LadderHistoryStore
    from escalation.adapters.pipeline import KeptThreads
    from escalation.adapters.redis_reconcile_notify import ReliabilityRedis
    from escalation.adapters.redis_warnings import RedisWarnings
    from escalation.adapters.retired_figures import RedisRetiredFigures
    from escalation.adapters.webhook import WebhookClient
    from escalation.domain.calendars import CalendarRegistry
    from escalation.domain.escalation import Escalation
    from escalation.ports import (
        AuditLog,
        CheckpointStore,
        DigestSigner,
        DigestVerifier,
        DocumentSigner,
        EventLog,
        LadderFiles,
        LadderHistory,
        LedgerReports,
        LedgerSearch,
        MetricsFigures,
        ReadinessProbe,
        SessionStore,
        StatsCounter,
        TokenStore,
    )
    from escalation.service_layer.case_file import CaseFilePorts
    from escalation.service_layer.core import CorePorts, Fanout, HelperProcess, Pipeline
    from escalation.service_layer.dead_letters import DeadLetters
    from escalation.service_layer.deadline_outcomes import ConsoleQueries, RolledDeadlines
    from escalation.service_layer.doctor import Check
    from escalation.service_layer.ladder_migration import LadderPorts
    from escalation.service_layer.maintenance import Job, Maintenance
    from escalation.service_layer.pause import PausePorts
    from escalation.service_layer.progress_report import Progress
    from escalation.service_layer.reconcile import AheadRepair, ProjectionLedger
    from escalation.service_layer.reconcile_incremental import (
        IncrementalReconcile,
        IncrementalReport,
    )
    from escalation.service_layer.sla_rollup import RollupStore
    from escalation.settings import Settings

log = get_logger(__name__)
_log = log


@dataclass(frozen=True, slots=True)
class Urls:
    """Resolved server URLs and whether they are the embedded servers."""

    redis_url: str
    database_url: str
    embedded: bool


def resolve_urls(settings: Settings) -> Urls:
    """Configured URLs, or start/reuse the embedded servers under ``settings.home``.

    Raises:
        EscalationError subclasses from the embedded adapter if a server cannot start.
    """
    if settings.redis_url and settings.database_url:
        return Urls(settings.redis_url, normalize_url(settings.database_url), embedded=False)
    from escalation.adapters.embedded import ensure_services

    urls = ensure_services(settings.home)
    return Urls(
        settings.redis_url or urls.redis_url,
        normalize_url(settings.database_url or urls.database_url),
        embedded=True,
    )


def make_worker_id(settings: Settings) -> str:
    """``settings.worker_id`` or ``"<host>:<pid>:<random4>"`` (unique per process)."""
    if settings.worker_id:
        return settings.worker_id
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:4]}"


@dataclass
class App:
    """The object graph one process uses. Call :meth:`close` when done."""

    settings: Settings
    urls: Urls
    redis: redis.Redis
    engine: sa.Engine
    scheduler: RedisScheduler
    store: PostgresAuditStore
    ladders: ReleasedLadders
    calendars: CalendarRegistry
    actor: str

    def close(self) -> None:
        """Close the Redis pool and dispose of the engine."""
        self.redis.close()
        self.engine.dispose()


def _check_layout(client: redis.Redis, settings: Settings) -> None:
    """Refuse a shard count other than the namespace's recorded one (adapters/redis_layout).
    Redis away at start, or out of memory (the first use records the count): not checked
    here (a worker starts and backs off as before; an enqueue records in PostgreSQL, then
    reports Redis's refusal in one line and ``reconcile`` schedules it later)."""
    try:
        check_shard_count(client, settings.namespace, settings.shards)
    except redis.exceptions.OutOfMemoryError as exc:
        # the command's own write meets the same refusal and says so in one line
        log.debug("bootstrap.shard_count_unchecked", error=str(exc)[:200])
    except OUTAGE_ERRORS as exc:
        log.warning("bootstrap.shard_count_unchecked", error=str(exc)[:200])


def readiness_probe_for(app: App) -> ReadinessProbe:
    """``/readyz``'s probe (``ports.ReadinessProbe``): ``app``'s Redis answers a PING, its
    database answers and its schema is at the Alembic head."""
    from escalation.adapters.probes import ReadinessChecks

    return ReadinessChecks(app.redis, app.engine)


def drop_redis_connections(app: App) -> None:
    """Disconnect ``app``'s pooled Redis connections (best effort, at a worker's stop; a
    cluster client has no single pool and reconnects per node by itself)."""
    pool = getattr(app.redis, "connection_pool", None)
    if pool is not None:
        try:
            pool.disconnect()
        except Exception:  # shutting down: nothing left to protect
            log.debug("worker.disconnect_failed", worker_id=app.actor)


def ensure_schema(engine: sa.Engine, urls: Urls) -> None:
    """Refuse a configured database behind the Alembic head; upgrade the embedded one."""
    try:
        check_at_head(engine)
    except SchemaNotAtHead:
        if not urls.embedded:
            raise
        upgrade_to_head(urls.database_url)


def redis_io_options(url: str, io_timeout_s: float) -> dict[str, Any]:
    """Client options that bound every Redis network wait by ``io_timeout_s`` seconds.

    Connect and read timeouts = ``io_timeout_s`` (well below the lease: see
    ``Settings.io_timeout_s``); TCP keepalive (idle 5 s, interval 2 s, 3 probes) on TCP URLs
    (one server, Cluster or Sentinel); a PING health check before reusing a connection idle
    longer than ``io_timeout_s``. A timed-out or reset connection is discarded by redis-py
    and the next call opens a new one (reconnect); the worker loop backs off and retries.
    """
    options: dict[str, Any] = {
        "socket_timeout": io_timeout_s, "socket_connect_timeout": io_timeout_s,
        "health_check_interval": max(1, int(io_timeout_s)),
    }
    if not url.startswith("unix://"):
        opts = {getattr(socket, name): value
                for name, value in (("TCP_KEEPIDLE", 5), ("TCP_KEEPINTVL", 2),
                                    ("TCP_KEEPCNT", 3))
                if hasattr(socket, name)}
        options.update(socket_keepalive=True, socket_keepalive_options=opts)
    return options


REDIS_OUTAGE_ERRORS: tuple[type[Exception], ...] = OUTAGE_ERRORS
"""The Redis client's errors of an outage (no server, a failover, a demoted primary): a
worker backs off and retries them (``adapters.redis_client.OUTAGE_ERRORS``)."""


TRANSIENT_STARTUP_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
    sa.exc.OperationalError, sa.exc.InterfaceError, ConnectionError,
)


# SQLSTATEs worth retrying: the server answered but is starting up / shutting down / full.
# Any other answer from the server (no such database, bad password) is final.
_RETRY_SQLSTATES = frozenset({"57P03", "57P01", "53300"})


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, sa.exc.DBAPIError):
        state = getattr(exc.orig, "sqlstate", None)
        if state is not None:
            return state in _RETRY_SQLSTATES
        # libpq reports a refused login without a SQLSTATE: the server's FATAL is final
        # unless it says it is starting up, shutting down or full
        text = str(exc.orig)
        if "FATAL:" in text:
            return any(m in text for m in ("starting up", "shutting down", "too many clients"))
    return True


RETRY_LOG_EVERY_S = 5.0
"""At most one ``startup.retry`` line per this many seconds (monotonic) of one outage."""


def retry_startup(probe: Callable[[], None], timeout_s: float,
                  sleep: Callable[[float], None] = time.sleep,
                  clock: Callable[[], float] = time.monotonic) -> None:
    """Run ``probe`` until it succeeds, retrying transient network errors for ``timeout_s``.

    Backoff between attempts: 0.2 s doubling to at most 2 s, times U(0.5, 1.0) (jittered so
    workers started together do not retry in step). Non-network errors (bad config, schema
    behind, evicting Redis) are raised at once. The first failed attempt logs a
    ``startup.retry`` WARNING, then at most one every :data:`RETRY_LOG_EVERY_S` seconds
    (``attempt`` counts every attempt): a 30 s outage is 6-7 lines, not one per attempt.

    Raises:
        the last transient error once ``timeout_s`` seconds (monotonic) have passed; the CLI
        prints it as one ``error: cannot reach ...`` line (exit 1).
    """
    deadline = clock() + timeout_s
    delay = 0.2
    attempt = 0
    logged_at: float | None = None
    while True:
        attempt += 1
        try:
            probe()
            return
        except TRANSIENT_STARTUP_ERRORS as exc:
            now = clock()
            left = deadline - now
            if left <= 0 or not _transient(exc):
                raise
            pause = min(left, delay * random.uniform(0.5, 1.0))
            if logged_at is None or now - logged_at >= RETRY_LOG_EVERY_S:
                logged_at = now
                _log.warning("startup.retry", attempt=attempt, error=str(exc)[:200],
                             sleep_s=round(pause, 2), gives_up_in_s=round(left, 1))
            sleep(pause)
            delay = min(2.0, delay * 2)


def build(
    settings: Settings,
    *,
    check_schema: bool = True,
    actor: str | None = None,
    strict_ladders: bool = False,
    durable_redis: bool = False,
    **_: Any,
) -> App:
    """Build the App for ``settings``.

    Args:
        check_schema: refuse to start unless the database is at the Alembic head (the
            embedded database, which is ours, is upgraded instead).
        strict_ladders: kept for callers; ladders are always the *released* versions
            (docs/adr/0004-ladder-release.md): an invalid or unreleased file changes nothing,
            a broken released file is reported (``ladders.errors``, doctor) and the
            escalations pinned to it are dead-lettered by the worker.
        actor: who acts (worker id or admin name); defaults to a fresh worker id.
        durable_redis: refuse a Redis whose maxmemory-policy may evict keys unless
            ``settings.allow_evicting_redis`` (workers, enqueue, import).

    Raises:
        SchemaNotAtHead: ``check_schema`` and the database is behind (run ``db upgrade``).
        LadderError: the ladder directory under ``settings.ladders_dir`` is missing.
        ConfigError: ``durable_redis`` and the Redis may evict keys.
    """
    urls = resolve_urls(settings)
    # one server, a Cluster or a Sentinel set, by URL scheme (adapters/redis_client.py),
    # every network wait bounded by io_timeout_s
    client = make_redis(urls.redis_url, **redis_io_options(urls.redis_url, settings.io_timeout_s))
    engine = make_engine(urls.database_url, io_timeout_s=settings.io_timeout_s)

    clock: list[int] = []  # Redis TIME (epoch ms) read by the last successful probe

    def probe() -> None:
        # every start-up network call sits in here, so a connection reset anywhere in
        # start-up is retried (a call after the probe would end the process instead); a
        # server that refuses the URL's login or DB index is a ConfigError, not retried
        ping_checked(client, urls.redis_url)
        if durable_redis:
            from escalation.adapters.redis_policy import refuse_evicting_redis

            refuse_evicting_redis(client, allow=settings.allow_evicting_redis)
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        if check_schema:
            ensure_schema(engine, urls)
            check_namespace(engine, settings.namespace)
            check_database_identity(engine, NamespaceBinding(client, settings.namespace))
        seconds, micros = client.time()
        clock[:] = [int(seconds) * 1000 + int(micros) // 1000]

    from escalation.adapters.ladder_history import LadderHistoryStore

    try:  # anything that fails from here to the App closes what was opened
        retry_startup(probe, settings.startup_timeout_s)
        calendars = load_institution_calendars(
            settings.calendars_file, settings.institution_calendar, settings.institution_timezone
        )
        # a ladder may count in any calendar of the deployment's calendars file
        ladders = released_ladders(LadderHistoryStore(engine), settings.ladders_dir,
                                   from_ms(clock[0]), calendars,
                                   refresh_s=settings.ladder_refresh_s)
        # materiality weights are written at enqueue; claim.lua ages them (docs/sla.md)
        scheduler = RedisScheduler(
            client, namespace=settings.namespace, shards=settings.shards,
            priority=weight_fn(ladders), aging_ms=settings.priority_aging_s * 1000,
        )
        _check_layout(client, settings)
    except BaseException:
        client.close()
        engine.dispose()
        raise
    from escalation.adapters.audit_store import PostgresAuditStore

    return App(
        settings=settings,
        urls=urls,
        redis=client,
        engine=engine,
        scheduler=scheduler,
        store=PostgresAuditStore(engine),
        ladders=ladders,
        calendars=calendars,
        actor=actor or make_worker_id(settings),
    )


def released_ladders(history: LadderHistoryStore, ladders_dir: Path,
                     now: datetime, calendars: CalendarRegistry | None = None,
                     *, refresh_s: float = 5.0) -> ReleasedLadders:
    """The released ladders of ``ladders_dir``, after a first-use baseline release
    (``service_layer.ladder_release.baseline_releases``), checked against ``calendars``
    (the deployment's: built-in plus ``ESCALATION_CALENDARS_FILE``; None = built-in),
    re-read every ``refresh_s`` seconds (``ESCALATION_LADDER_REFRESH_S``).

    Raises:
        LadderError: the directory is missing.
    """
    if not ladders_dir.is_dir():
        raise LadderError(f"{ladders_dir}: (directory): ladder directory not found")
    baseline_releases(history, LadderCatalog.from_dir(ladders_dir, strict=False,
                                                      calendars=calendars), now)
    return ReleasedLadders(ladders_dir, history.released_checksums, calendars=calendars,
                           refresh_s=refresh_s)


# --------------------------------------------------------------------------- use-case wiring
def reliability_for(app: App) -> ReliabilityRedis:
    """Reliability reads and scripts on ``app``'s namespace, shards and priority aging."""
    from escalation.adapters.redis_reconcile_notify import ReliabilityRedis

    return ReliabilityRedis(app.redis, app.settings.namespace, app.settings.shards,
                            aging_ms=app.settings.priority_aging_s * 1000)


@dataclass(frozen=True)
class WriterLedger:
    """An audit log on its own connection pool (the HTTP API's group-commit writers);
    :meth:`close` disposes of the pool."""

    store: AuditLog
    engine: sa.Engine

    def close(self) -> None:
        """Dispose of the pool's connections."""
        self.engine.dispose()


def writer_ledger_for(app: App, writers: int) -> WriterLedger:
    """An audit log on a pool of ``writers`` connections of its own to ``app``'s database,
    without a pre-ping round trip per checkout (a batch that meets a dropped connection is
    written again by its caller); the caller closes it."""
    from escalation.adapters.audit_store import PostgresAuditStore

    engine = make_engine(app.urls.database_url, pool_size=writers,
                         io_timeout_s=app.settings.io_timeout_s, pre_ping=False)
    return WriterLedger(PostgresAuditStore(engine), engine)


def stats_counter_for(app: App) -> StatsCounter:
    """The namespace's operational counters in Redis (``ports.StatsCounter``): what the
    worker counts outside a script, reported by ``/metrics``."""
    from escalation.adapters.redis_stats import RedisStatsCounter

    return RedisStatsCounter(app.redis, app.settings.namespace)


def metrics_figures_for(app: App) -> MetricsFigures:
    """The ledger's ``/metrics`` figures (``ports.MetricsFigures``) on ``app``'s engine, the
    decision figures including those retention saved in Redis for removed partitions."""
    from escalation.adapters.metrics_queries import PostgresMetricsFigures

    return PostgresMetricsFigures(app.engine, retired=retired_figures_for(app).load)


def ladder_history_for(app: App) -> LadderHistory:
    """The ladder releases, apply runs and the per-batch migration write
    (``ports.LadderHistory``) on ``app``'s engine."""
    from escalation.adapters.ladder_history import LadderHistoryStore

    return LadderHistoryStore(app.engine)


def ladder_files_for(app: App) -> LadderFiles:
    """Every ladder file of ``app``'s ladder directory, read now, checked against
    ``app.calendars`` (``ports.LadderFiles``; lenient: an invalid file is skipped and named in
    ``errors``): what ``ladder release`` validates and records."""
    return LadderCatalog.from_dir(app.settings.ladders_dir, strict=False,
                                  calendars=app.calendars)


def retired_figures_for(app: App) -> RedisRetiredFigures:
    """Decision figures of ledger partitions removed by retention (``/metrics`` counters
    stay monotonic across ``audit partitions drop-expired``), on ``app``'s namespace."""
    from escalation.adapters.retired_figures import RedisRetiredFigures

    return RedisRetiredFigures(app.redis, app.settings.namespace)


def webhook_client_for(url: str, key: bytes, timeout_s: float,
                       max_connections: int) -> WebhookClient:
    """The pooled, keep-alive webhook client of ``escalation notify`` (the caller closes it).

    Raises:
        InvalidInput: a URL that is not http(s), a timeout <= 0, ``max_connections`` < 1.
    """
    from escalation.adapters.webhook import WebhookClient

    return WebhookClient(url, key, timeout_s, max_connections)


def delivery_fanout(concurrency: int) -> KeptThreads:
    """How ``escalation notify`` delivers the disputes of one step: up to ``concurrency``
    webhook calls at once on helper threads kept for the whole run (``NotifyPorts.fanout``;
    the caller closes it after the notifier's last step; the webhooks figure of
    docs/performance.md, "Current figures")."""
    from escalation.adapters.pipeline import KeptThreads

    return KeptThreads(concurrency, "notify")


def warnings_for(app: App) -> RedisWarnings:
    """The warnings queue matching ``app.scheduler``'s namespace and shards."""
    from escalation.adapters.redis_warnings import RedisWarnings

    return RedisWarnings(app.redis, app.scheduler.namespace, app.scheduler.shards)


def write_pipeline() -> Pipeline:
    """How enqueue and import write their batches: the Redis step of batch k on one helper
    thread while batch k+1 is recorded in PostgreSQL (docs/performance.md, "CSV import")."""
    from escalation.adapters.pipeline import Overlapped

    return Overlapped("enqueue-redis")


def pass1_helper(processes: int | None = None) -> HelperProcess | None:
    """The helper process of the CSV import's two-process pass 1 (``import_parallel``): a
    forked child (``adapters.helper_process.ForkedHelper``) when ``processes`` is 2, or is
    None on a machine with ``os.fork`` and at least two CPUs; else None (one process)."""
    if processes == 1 or not hasattr(os, "fork"):
        return None
    if processes is None and (os.cpu_count() or 1) < 2:
        return None
    from escalation.adapters.helper_process import ForkedHelper

    return ForkedHelper()


def outcome_fanout() -> Fanout:
    """How the import's pass 3 records outcomes: ``OUTCOME_THREADS`` rows at once on helper
    threads, within the engine's pool (5 connections, up to 5 more under load:
    ``adapters.db.make_engine``)."""
    from escalation.adapters.pipeline import Threads

    return Threads(OUTCOME_THREADS, "import-outcomes")


def page_fanout() -> Fanout:
    """How a console page runs its independent reads: up to three at once on helper
    threads (the overview's load per tier, its cards and its period figures; each takes a
    connection of the PostgreSQL pool's 5 plus 5)."""
    from escalation.adapters.pipeline import Threads

    return Threads(3, "console-page")


OUTCOME_THREADS = 4
"""Rows of the import's pass 3 recorded at once (:func:`outcome_fanout`)."""


def core_ports_for(app: App) -> CorePorts:
    """The scheduler, audit log, ladders and calendars of ``app``, with the overlapped write
    pipeline (:func:`write_pipeline`)."""
    from escalation.service_layer.core import CorePorts

    return CorePorts(app.scheduler, app.store, app.ladders, app.calendars, write_pipeline())


def pause_ports_for(app: App) -> PausePorts:
    """The ports of ``pause`` and ``resume`` (``service_layer.pause.PausePorts``) of ``app``."""
    from escalation.service_layer.pause import PausePorts

    return PausePorts(app.scheduler, app.store, app.ladders, app.calendars)


def ladder_ports_for(app: App) -> LadderPorts:
    """What ``ladder plan`` and ``ladder apply`` run on: the migration history of ``app``'s
    database, its scheduler, ladder files and calendars, and a pipeline that reads and plans
    the next page and restores the previous batch into Redis while a batch is recorded
    (docs/performance.md, "Ladder migrations")."""
    from escalation.adapters.ladder_history import LadderHistoryStore
    from escalation.adapters.pipeline import Overlapped
    from escalation.service_layer.ladder_migration import LadderPorts

    return LadderPorts(LadderHistoryStore(app.engine), app.scheduler, app.ladders, app.calendars,
                       Overlapped("ladder-apply", read_ahead=True))


def schedule_for(
    app: App, *, only_ahead: bool = False
) -> Callable[[Sequence[Escalation]], object]:
    """A hook ``escalations -> None`` scheduling their pre-breach warnings (the
    ``on_scheduled`` of enqueue, import, fire_due and ladder migration). ``only_ahead``:
    drop warnings whose instant has passed (a migration re-schedules a tier already
    running: its earlier warnings belong to the earlier run)."""
    from escalation.service_layer.warnings import schedule_ahead, schedule_warnings

    queue = warnings_for(app)
    if not only_ahead:
        return partial(schedule_warnings, warnings=queue, ladders=app.ladders,
                       calendars=app.calendars)

    def hook(escalations: Sequence[Escalation]) -> None:
        schedule_ahead(escalations, warnings=queue, ladders=app.ladders,
                       calendars=app.calendars, now=app.scheduler.time())

    return hook


def schedule_resumed(app: App, result: Any) -> int:
    """Schedule the warnings of a ``pause.resume`` result as fractions of active (unpaused)
    time. Returns how many were new."""
    from escalation.service_layer.warnings import schedule_resumed as schedule_resumed_warnings

    return schedule_resumed_warnings(result, warnings=warnings_for(app), ladders=app.ladders,
                                     calendars=app.calendars)


def database_writable_for(app: App) -> Callable[[], bool]:
    """A cheap probe of ``app``'s database: True when it accepts writes (a primary), False
    when it is read-only (a hot standby, a failover's read-only window; the pooled
    connections are dropped so that a multi-host URL picks its host again). Raises the
    driver's outage errors when nothing answers (``adapters.db.database_writable``)."""
    from escalation.adapters.db import database_writable

    def probe() -> bool:
        return database_writable(app.engine)

    return probe


def dead_letters_for(app: App, *, actor: str | None = None) -> DeadLetters:
    """DeadLetters wired from an App (the worker's poison hook, the ``dead`` commands, the
    console's operations page); ``actor`` writes its ledger rows (default ``app.actor``)."""
    from escalation.service_layer.dead_letters import DeadLetters

    return DeadLetters(rel=reliability_for(app), scheduler=app.scheduler, store=app.store,
                       actor=actor or app.actor)


def projection_ledger_for(app: App) -> ProjectionLedger:
    """The projection against its ledger (``reconcile.ProjectionLedger``: the streamed
    comparison and the repair from the ledger) on ``app``'s engine."""
    from escalation.adapters.projection_scan import PostgresProjectionLedger

    return PostgresProjectionLedger(app.engine)


def reconcile_run_for(
    app: App, cmd: IncrementalReconcile, *, ahead: AheadRepair | None,
    rel: ReliabilityRedis | None = None, progress: Progress | None = None,
) -> IncrementalReport:
    """Run one incremental reconcile (``service_layer.reconcile_incremental``; a full one
    when ``cmd.full`` or when its state says so) on ``app``'s servers: the watermark and
    sweep state in Redis, the changed disputes' projection checked against their ledger,
    pending warnings of restored escalations scheduled; with ``cmd.check_projection`` a
    full run also compares the whole projection with the ledger (the CLI; the periodic run
    does not).
    """
    from escalation.adapters.reconcile_state import (
        PostgresLedgerChanges,
        PostgresProjectionSubset,
        RedisMemberSweep,
        RedisReconcileState,
    )
    from escalation.service_layer.progress_report import no_progress
    from escalation.service_layer.reconcile import ReconcileHooks
    from escalation.service_layer.reconcile_incremental import (
        IncrementalPorts,
        reconcile_incremental,
    )

    rel = rel or reliability_for(app)
    ns, shards = app.settings.namespace, app.settings.shards
    return reconcile_incremental(
        cmd,
        IncrementalPorts(
            scheduler=app.scheduler, store=app.store, redis_side=rel,
            changes=PostgresLedgerChanges(app.engine),
            members=RedisMemberSweep(app.redis, ns, shards),
            state_store=RedisReconcileState(app.redis, ns), ahead=ahead,
            projection=PostgresProjectionSubset(app.engine),
            full_projection=projection_ledger_for(app) if cmd.check_projection else None),
        ReconcileHooks(progress=progress or no_progress,
                       on_restored=schedule_for(app, only_ahead=True)))


def token_store_for(app: App) -> TokenStore:
    """The API tokens' digests (``ports.TokenStore``) on ``app``'s engine."""
    from escalation.adapters.token_store import PostgresTokenStore

    return PostgresTokenStore(app.engine)


def session_store_for(app: App) -> SessionStore:
    """The console sessions (``ports.SessionStore``) on ``app``'s engine."""
    from escalation.adapters.token_store import PostgresSessionStore

    return PostgresSessionStore(app.engine)


def console_ops_for(app: App) -> ConsoleOpsStore:
    """The read-only queries of the console's ladders and operations pages
    (``ports.ConsoleOpsReads``) on ``app``'s engine, Redis, namespace and shards."""
    from escalation.adapters.console_ops import ConsoleOpsStore

    return ConsoleOpsStore(app.engine, app.redis, app.settings.namespace, app.settings.shards,
                           aging_ms=app.settings.priority_aging_s * 1000)


def maintenance_jobs(app: App, rel: ReliabilityRedis,
                     stop_check: Callable[[], None] | None = None) -> list[Job]:
    """reconcile (5 min), dead-letter alerts (1 min), ledger partition upkeep (1 h).

    ``stop_check()`` is called by reconcile between its pages (no client call in flight
    there); it may raise to end a long reconcile early when the worker is asked to stop
    (the next leader's run repairs the rest: every repair is idempotent)."""
    from escalation.adapters.partitions import ensure_partitions
    from escalation.service_layer.dead_letters import DeadLetterCap, cap_dead_letters
    from escalation.service_layer.maintenance import Job, alert_dead_letter_cap
    from escalation.service_layer.reconcile import AheadRepair
    from escalation.service_layer.reconcile_incremental import IncrementalReconcile

    def between_pages(phase: str, done: int, total: int | None) -> None:
        if stop_check is not None:
            stop_check()

    def do_reconcile() -> dict[str, Any]:
        # Redis ahead of the ledger is not reset here: the namespace is marked and the
        # workers refuse to fire it until an operator runs `escalation reconcile` (ADR 0014)
        # each run: the disputes whose ledger changed since the last one plus a slice of the
        # full sweep (docs/reliability.md "Incremental reconcile")
        run = reconcile_run_for(
            app, IncrementalReconcile(app.settings.reconcile_sweep_period_s),
            ahead=AheadRepair(mark=namespace_binding_for(app), stream=rel), rel=rel,
            progress=between_pages)
        rep = run.report
        return {"mode": run.mode, "reason": run.reason, "changed": run.changed,
                "sweep_rows": run.sweep_rows, "sweep_members": run.sweep_members,
                "sweep_position": round(run.sweep_position, 6),
                "checked_db": rep.checked_db, "repaired": rep.count(repaired=True),
                "differences": rep.count()}

    def partitions() -> dict[str, Any]:
        ahead = int(app.settings.audit_partitions_ahead)
        made = ensure_partitions(app.engine, from_ms(rel.now_ms()), ahead)
        return {"created": list(made)}

    return [Job("reconcile", 300, do_reconcile),
            Job("dead_letter_alerts", 60, lambda: alert_dead_letter_cap(cap_dead_letters(
                DeadLetterCap(app.settings.dead_letter_max, app.settings.dead_letter_max_age_days),
                dead_letters_for(app)))),
            Job("partitions", 3600, partitions)]


def maintenance_for(app: App, *, ttl_ms: int | None = None,
                    stop_check: Callable[[], None] | None = None) -> Maintenance:
    """The worker's Maintenance: lease = 3 x lease_ms (>= 15 s), the default jobs
    (``stop_check``: see :func:`maintenance_jobs`)."""
    from escalation.adapters.leader_lease import LeaderLease, LeaseTerms
    from escalation.adapters.maintenance_runs import PostgresMaintenanceRuns
    from escalation.service_layer.maintenance import Maintenance

    rel = reliability_for(app)
    ttl = ttl_ms or max(15_000, 3 * int(app.settings.lease_ms))
    return Maintenance(runs=PostgresMaintenanceRuns(app.engine),
                       lease=LeaderLease(rel, LeaseTerms(ttl_ms=ttl),
                                         redis_ms=app.scheduler.estimated_now_ms),
                       jobs=maintenance_jobs(app, rel, stop_check),
                       actor=app.actor)


def _bound(app: App) -> bool:
    """True when the database is bound to this namespace (``db upgrade``): then it is one
    deployment's, and every ladder released in it belongs to the configured directory (an
    unbound database, such as a test suite's, may hold other directories' releases)."""
    return check_namespace(app.engine, app.settings.namespace) is not None


def ladder_file_problems(app: App) -> list[LadderProblem]:
    """Broken releases (released files missing, invalid or edited, re-read now; code
    ``RELEASE_BROKEN``), then every other ``ladder check`` problem of the other files (code
    ``LADDER_INVALID``); a failure of the check is reported, never raised."""
    from escalation.adapters.ladder_history import LadderHistoryStore

    try:
        ladders = app.ladders
        ladders.refresh()
        broken = ladders.problems()
        files = {e.release.file for e in broken if e.release is not None}
        others = check_ladder_dir_with_history(app.settings.ladders_dir,
                                               LadderHistoryStore(app.engine), app.calendars,
                                               deployment=_bound(app), skip=files)
    except Exception as exc:  # doctor reports, never crashes
        return [LadderProblem(ErrorCode.LADDER_INVALID,
                              f"ladder files could not be checked: {exc}")]
    return ([LadderProblem(e.code, str(e)) for e in broken]
            + [LadderProblem(ErrorCode.LADDER_INVALID, e) for e in others])


def run_doctor(app: App, *, host_ms: Callable[[], int] | None = None,
               max_skew_ms: int = DEFAULT_MAX_SKEW_MS) -> list[Check]:
    """``service_layer.doctor.run_checks`` against the live deployment of ``app``."""
    from escalation.adapters.probes import ServerProbe
    from escalation.service_layer.doctor import DoctorDeps, run_checks

    deps = DoctorDeps(store=app.store, redis_side=reliability_for(app),
                      probe=ServerProbe(app.redis, app.engine),
                      scheduler_stats=app.scheduler.stats,
                      ladder_problems=lambda: ladder_file_problems(app),
                      resync=namespace_binding_for(app))
    return run_checks(deps, host_ms=host_ms, max_skew_ms=max_skew_ms)


def namespace_binding_for(app: App) -> NamespaceBinding:
    """The namespace's identity stamp and resync mark (``ports.ResyncMark``) on ``app``'s
    Redis (ADR 0014)."""
    return NamespaceBinding(app.redis, app.settings.namespace)


def _identity_mismatch(namespace: str, recorded: str, identity: str | None) -> str:
    here = identity or "none (a new or never-stamped database)"
    return (f"Redis namespace {namespace!r} belongs to another database (recorded identity "
            f"{recorded}, this database {here}): a restored, copied or new database would "
            "leave Redis ahead of the ledger. If this database was restored on purpose, run "
            "`escalation db upgrade --restored`, then `escalation reconcile` (docs/"
            "operations.md, 'Restoring the database'); otherwise point ESCALATION_DATABASE_URL "
            "at the namespace's database or use another ESCALATION_NAMESPACE")


def check_database_identity(engine: sa.Engine, binding: NamespaceBinding) -> None:
    """Refuse a database whose identity differs from the one the namespace's Redis recorded
    at binding, an unstamped (new, never-bound) database included: once the namespace's
    Redis records a database, only that one serves it until ``db upgrade --restored``
    binds another. Nothing to compare while Redis records none (a new namespace, or one
    bound before stamps existed: ``db upgrade`` stamps both).

    Raises:
        ConfigError: the identities differ (the message names both and the commands).
    """
    recorded = binding.database_identity()
    if recorded is None:
        return
    identity = database_identity(engine)
    if recorded != identity:
        raise ConfigError(_identity_mismatch(binding.namespace, recorded, identity))


def check_identity_before_upgrade(settings: Settings, database_url: str,
                                  redis_url: str) -> None:
    """Refuse, before ``db upgrade`` migrates anything, a database other than the one the
    namespace's Redis recorded (the check :func:`bind_deployment` repeats once migrated), so
    a refused upgrade writes nothing (docs/cli.md: exit 2). A database without the binding
    table yet (empty, or an older schema) has no identity.

    Raises:
        ConfigError: Redis records another database's identity (the message names both and
            ``db upgrade --restored``).
        Redis / database connection errors propagate.
    """
    client = make_redis(redis_url, **redis_io_options(redis_url, settings.io_timeout_s))
    engine = make_engine(database_url, pool_size=1)
    try:
        recorded = NamespaceBinding(client, settings.namespace).database_identity()
        if recorded is None:
            return
        try:
            identity = database_identity(engine)
        except sa.exc.ProgrammingError:  # no deployment_binding (stamp) yet
            identity = None
        if recorded != identity:
            raise ConfigError(_identity_mismatch(settings.namespace, recorded, identity))
    finally:
        engine.dispose()
        client.close()


@dataclass(frozen=True)
class BindResult:
    """What :func:`bind_deployment` did: the namespace, the database identity now recorded
    in both servers, and whether the namespace was marked for a resync (``--restored``)."""

    namespace: str
    identity: str
    resync_marked: bool


def bind_deployment(settings: Settings, database_url: str, redis_url: str, *,
                    restored: bool = False) -> BindResult:
    """Bind the (migrated) database to ``settings.namespace`` and stamp its identity in
    PostgreSQL and in the namespace's Redis (``db upgrade``; ADR 0009, ADR 0014).

    Refused, before anything is written, when Redis records another database's identity
    (a restore into another database, a copy, a new database), unless ``restored``: then the
    database gets a new stamp, Redis records it, and the namespace is marked for a resync
    (workers refuse to fire it until ``escalation reconcile`` has reset Redis to the
    ledger's state).

    Raises:
        ConfigError: bound to another namespace, or Redis belongs to another database.
        Redis / database connection errors propagate.
    """
    from escalation.adapters.db import stamp_binding

    client = make_redis(redis_url, **redis_io_options(redis_url, settings.io_timeout_s))
    engine = make_engine(database_url, pool_size=1)
    try:
        binding = NamespaceBinding(client, settings.namespace)
        check_namespace(engine, settings.namespace)
        recorded = binding.database_identity()
        identity = database_identity(engine)
        if not restored and recorded is not None and recorded != identity:
            raise ConfigError(_identity_mismatch(settings.namespace, recorded, identity))
        bound = bind_namespace(engine, settings.namespace)
        identity = stamp_binding(engine, renew=restored)
        if restored:
            binding.mark_resync("restored", f"db upgrade --restored bound database "
                                f"{engine.url.database!r} ({identity}); Redis may be ahead "
                                "of its ledger")
        binding.stamp(identity)
        return BindResult(bound, identity, restored)
    finally:
        engine.dispose()
        client.close()


def _engine_of(source: App | sa.Engine) -> sa.Engine:
    """The engine of an ``App``, or ``source`` itself (the commands that build no ``App``)."""
    return source.engine if isinstance(source, App) else source


def checkpoint_store_for(source: App | sa.Engine) -> CheckpointStore:
    """The ``CheckpointStore`` (``adapters.checkpoints.PostgresCheckpoints``) on ``source``
    (an ``App``'s database, or an engine): checkpoints, verification and the retention rows."""
    from escalation.adapters.checkpoints import PostgresCheckpoints

    return PostgresCheckpoints(_engine_of(source))


def ledger_search_for(source: App | sa.Engine) -> LedgerSearch:
    """The ledger's search and streaming reads (``ports.LedgerSearch``) on ``source`` (an
    ``App``'s database, or an engine)."""
    from escalation.adapters.audit_search import PostgresLedgerSearch

    return PostgresLedgerSearch(_engine_of(source))


def ledger_reports_for(source: App | sa.Engine) -> LedgerReports:
    """The SLA report's rows (``ports.LedgerReports``) on ``source`` (an ``App``'s database,
    or an engine)."""
    from escalation.adapters.report_queries import PostgresReports

    return PostgresReports(_engine_of(source))


def sla_rollup_for(source: App | sa.Engine) -> RollupStore:
    """The per-dispute SLA rollup (``sla_rollup.RollupStore``; ADR 0033) on ``source`` (an
    ``App``'s database, or an engine)."""
    from escalation.adapters.sla_rollup import PostgresSlaRollup

    return PostgresSlaRollup(_engine_of(source))


def rolled_deadlines_for(source: App | sa.Engine) -> RolledDeadlines:
    """The SLA rollup's deadline rows as the console reads them
    (``deadline_outcomes.RolledDeadlines``; docs/adr/0037) on ``source`` (an ``App``'s
    database, or an engine)."""
    from escalation.adapters.console_queries import PostgresRolledDeadlines

    return PostgresRolledDeadlines(_engine_of(source))


def console_queries_for(source: App | sa.Engine) -> ConsoleQueries:
    """The console's read-only queries (``ports.ConsoleQueries``) on ``source`` (an ``App``'s
    database, or an engine)."""
    from escalation.adapters.console_queries import PostgresConsoleQueries

    return PostgresConsoleQueries(_engine_of(source))


def event_log_for(source: App | sa.Engine) -> EventLog:
    """One dispute's state and trail, and event appends (``ports.EventLog``) on ``source`` (an
    ``App``'s database, or an engine; the commands that need no Redis)."""
    from escalation.adapters.audit_store import PostgresAuditStore

    return PostgresAuditStore(_engine_of(source))


def digest_signer_for() -> DigestSigner | None:
    """The ``DigestSigner`` of the configured checkpoint signing key
    (``ESCALATION_CHECKPOINT_KEY_FILE`` / ``ESCALATION_CHECKPOINT_KEY``), or None when no key
    is configured. Raises ConfigError for an unreadable or non-Ed25519 key."""
    from escalation.adapters.signing import Ed25519DigestSigner, load_private_key

    key = load_private_key()
    return None if key is None else Ed25519DigestSigner(key)


def digest_verifier_for(public_key: Path | None = None) -> DigestVerifier | None:
    """The ``DigestVerifier`` checkpoints are trusted under: ``public_key`` (PEM) if given,
    else ``ESCALATION_CHECKPOINT_PUBLIC_KEY_FILE``, else the configured signing key's public
    half; None when none is configured (ADR 0013). Raises InvalidInput / ConfigError for a
    key that cannot be read."""
    from escalation.adapters.signing import Ed25519DigestVerifier, configured_public_key

    key = configured_public_key(path=public_key)
    return None if key is None else Ed25519DigestVerifier(key)


def case_file_ports_for(source: App | sa.Engine, settings: Settings,
                        ladders: Callable[[str, int], Any],
                        calendars: CalendarRegistry) -> CaseFilePorts:
    """The ports of ``service_layer.case_file.export_case_file`` on ``source`` (an ``App``'s
    database, or an engine): the ledger (trail, search, report rows), the checkpoints,
    ``ladders`` (``(name, version) -> Ladder`` of the released versions) and ``calendars``,
    the ladder and calendars files, and the checkpoint signing key. No Redis is needed.

    Raises:
        ConfigError: no signing key configured (``ESCALATION_CHECKPOINT_KEY_FILE`` /
            ``ESCALATION_CHECKPOINT_KEY``), or one that cannot be read.
    """
    from escalation.adapters.audit_search import PostgresLedgerSearch
    from escalation.adapters.audit_store import PostgresAuditStore
    from escalation.adapters.checkpoints import PostgresCheckpoints
    from escalation.adapters.evidence import Ed25519DocumentSigner, EvidenceFiles
    from escalation.adapters.ladder_history import LadderHistoryStore
    from escalation.adapters.report_queries import PostgresReports
    from escalation.adapters.signing import KEY_ENV, KEY_FILE_ENV, load_private_key
    from escalation.domain.errors import ConfigError
    from escalation.service_layer.case_file import CaseFilePorts

    key = load_private_key()
    if key is None:
        raise ConfigError(f"set {KEY_FILE_ENV} (or {KEY_ENV}) to the checkpoint signing key: "
                          "a case file carries the signed checkpoint digest and is signed")
    engine = _engine_of(source)
    return CaseFilePorts(
        events=PostgresAuditStore(engine), ledger=PostgresLedgerSearch(engine),
        reports=PostgresReports(engine), checkpoints=PostgresCheckpoints(engine),
        ladders=ladders, calendars=calendars,
        files=EvidenceFiles(ladders, settings.calendars_file,
                            LadderHistoryStore(engine).released_checksums),
        signer=Ed25519DocumentSigner(key))


def document_signer_for() -> DocumentSigner | None:
    """The ``DocumentSigner`` of the configured checkpoint signing key
    (``ESCALATION_CHECKPOINT_KEY_FILE`` / ``ESCALATION_CHECKPOINT_KEY``), or None when no key
    is configured: signs case files and export manifests. Raises ConfigError for an
    unreadable or non-Ed25519 key."""
    from escalation.adapters.evidence import Ed25519DocumentSigner
    from escalation.adapters.signing import load_private_key

    key = load_private_key()
    return None if key is None else Ed25519DocumentSigner(key)
