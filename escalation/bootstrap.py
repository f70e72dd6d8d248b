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
from pathlib import Path
from typing import Any

import redis
import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.calendar_files import load_institution_calendars
from escalation.adapters.console_ops import ConsoleOpsStore
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
from escalation.adapters.ladder_history import LadderHistoryStore
from escalation.adapters.leader_lease import LeaderLease
from escalation.adapters.maintenance_runs import PostgresMaintenanceRuns
from escalation.adapters.probes import ServerProbe
from escalation.adapters.redis_binding import NamespaceBinding
from escalation.adapters.redis_client import OUTAGE_ERRORS, make_redis, ping_checked
from escalation.adapters.redis_layout import check_shard_count
from escalation.adapters.redis_reliability import ReliabilityRedis
from escalation.adapters.redis_scheduler import RedisScheduler
from escalation.adapters.redis_warnings import RedisWarnings
from escalation.adapters.retired_figures import RedisRetiredFigures
from escalation.adapters.webhook import WebhookClient
from escalation.domain.calendars import CalendarRegistry
from escalation.domain.errors import RELEASE_BROKEN, ConfigError, LadderError, SchemaNotAtHead
from escalation.domain.escalation import Escalation
from escalation.domain.timeutil import from_ms
from escalation.logs import get_logger
from escalation.ports import (
    CheckpointStore,
    DigestSigner,
    DigestVerifier,
    DocumentSigner,
    SessionStore,
    TokenStore,
)
from escalation.service_layer.case_file import CaseFilePorts
from escalation.service_layer.dead_letters import DeadLetterCap, DeadLetters, cap_dead_letters
from escalation.service_layer.doctor import DEFAULT_MAX_SKEW_MS, Check, DoctorDeps, run_checks
from escalation.service_layer.ladder_release import baseline_releases
from escalation.service_layer.maintenance import Job, Maintenance, alert_dead_letter_cap
from escalation.service_layer.priority import weight_fn
from escalation.service_layer.progress import Progress
from escalation.service_layer.reconcile import AheadRepair, ProjectionLedger
from escalation.service_layer.reconcile_incremental import (
    IncrementalReconcile,
    IncrementalReport,
    reconcile_incremental,
)
from escalation.service_layer.warnings import (
    schedule_ahead,
    schedule_warnings,
)
from escalation.service_layer.warnings import (
    schedule_resumed as schedule_resumed_warnings,
)
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

    try:  # anything that fails from here to the App closes what was opened
        retry_startup(probe, settings.startup_timeout_s)
        calendars = load_institution_calendars(
            settings.calendars_file, settings.institution_calendar, settings.institution_timezone
        )
        # a ladder may count in any calendar of the deployment's calendars file
        ladders = released_ladders(LadderHistoryStore(engine), settings.ladders_dir,
                                   from_ms(clock[0]), calendars,
                                   refresh_s=settings.ladder_refresh_s)
    except BaseException:
        client.close()
        engine.dispose()
        raise
    # materiality weights are written at enqueue; claim.lua ages them (docs/sla.md)
    scheduler = RedisScheduler(
        client, namespace=settings.namespace, shards=settings.shards,
        priority=weight_fn(ladders), aging_ms=settings.priority_aging_s * 1000,
    )
    _check_layout(client, settings)
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
    return ReliabilityRedis(app.redis, app.settings.namespace, app.settings.shards,
                            aging_ms=app.settings.priority_aging_s * 1000)


def retired_figures_for(app: App) -> RedisRetiredFigures:
    """Decision figures of ledger partitions removed by retention (``/metrics`` counters
    stay monotonic across ``audit partitions drop-expired``), on ``app``'s namespace."""
    return RedisRetiredFigures(app.redis, app.settings.namespace)


def webhook_client_for(url: str, key: bytes, timeout_s: float,
                       max_connections: int) -> WebhookClient:
    """The pooled, keep-alive webhook client of ``escalation notify`` (the caller closes it).

    Raises:
        InvalidInput: a URL that is not http(s), a timeout <= 0, ``max_connections`` < 1.
    """
    return WebhookClient(url, key, timeout_s, max_connections)


def warnings_for(app: App) -> RedisWarnings:
    """The warnings queue matching ``app.scheduler``'s namespace and shards."""
    return RedisWarnings(app.redis, app.scheduler.namespace, app.scheduler.shards)


def schedule_for(
    app: App, *, only_ahead: bool = False
) -> Callable[[Sequence[Escalation]], None]:
    """A hook ``escalations -> None`` scheduling their pre-breach warnings (the
    ``on_scheduled`` of enqueue, import, fire_due and ladder migration). ``only_ahead``:
    drop warnings whose instant has passed (a migration re-schedules a tier already
    running: its earlier warnings belong to the earlier run)."""
    queue = warnings_for(app)

    def hook(escalations: Sequence[Escalation]) -> None:
        if only_ahead:
            schedule_ahead(escalations, warnings=queue, ladders=app.ladders,
                           calendars=app.calendars, now=app.scheduler.time())
        else:
            schedule_warnings(escalations, warnings=queue, ladders=app.ladders,
                              calendars=app.calendars)

    return hook


def schedule_resumed(app: App, result: Any) -> int:
    """Schedule the warnings of a ``pause.resume`` result as fractions of active (unpaused)
    time. Returns how many were new."""
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
    full_projection: bool = False,
) -> IncrementalReport:
    """Run one incremental reconcile (``service_layer.reconcile_incremental``; a full one
    when ``cmd.full`` or when its state says so) on ``app``'s servers: the watermark and
    sweep state in Redis, the changed disputes' projection checked against their ledger,
    pending warnings of restored escalations scheduled. ``full_projection``: a full run
    also compares the whole projection with the ledger (the CLI; the periodic run does not).
    """
    from escalation.adapters.reconcile_state import (
        PostgresLedgerChanges,
        PostgresProjectionSubset,
        RedisMemberSweep,
        RedisReconcileState,
    )
    from escalation.service_layer.progress import no_progress

    rel = rel or reliability_for(app)
    ns, shards = app.settings.namespace, app.settings.shards
    return reconcile_incremental(
        cmd, scheduler=app.scheduler, store=app.store, redis_side=rel,
        changes=PostgresLedgerChanges(app.engine),
        members=RedisMemberSweep(app.redis, ns, shards),
        state_store=RedisReconcileState(app.redis, ns), ahead=ahead,
        projection=PostgresProjectionSubset(app.engine),
        full_projection=projection_ledger_for(app) if full_projection else None,
        progress=progress or no_progress, on_restored=schedule_for(app, only_ahead=True))


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
    return ConsoleOpsStore(app.engine, app.redis, app.settings.namespace, app.settings.shards,
                           aging_ms=app.settings.priority_aging_s * 1000)


def maintenance_jobs(app: App, rel: ReliabilityRedis,
                     stop_check: Callable[[], None] | None = None) -> list[Job]:
    """reconcile (5 min), dead-letter alerts (1 min), ledger partition upkeep (1 h).

    ``stop_check()`` is called by reconcile between its pages (no client call in flight
    there); it may raise to end a long reconcile early when the worker is asked to stop
    (the next leader's run repairs the rest: every repair is idempotent)."""
    from escalation.adapters.partitions import ensure_partitions

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
    rel = reliability_for(app)
    ttl = ttl_ms or max(15_000, 3 * int(app.settings.lease_ms))
    return Maintenance(runs=PostgresMaintenanceRuns(app.engine),
                       lease=LeaderLease(rel, ttl_ms=ttl,
                                         redis_ms=app.scheduler.estimated_now_ms),
                       jobs=maintenance_jobs(app, rel, stop_check),
                       actor=app.actor)


def _bound(app: App) -> bool:
    """True when the database is bound to this namespace (``db upgrade``): then it is one
    deployment's, and every ladder released in it belongs to the configured directory (an
    unbound database, such as a test suite's, may hold other directories' releases)."""
    return check_namespace(app.engine, app.settings.namespace) is not None


def ladder_file_problems(app: App) -> list[str]:
    """Broken releases (released files missing, invalid or edited, re-read now), then every
    other ``ladder check`` problem; a failure of the check is reported, never raised."""
    try:
        ladders = app.ladders
        ladders.refresh()
        broken = list(ladders.problems())
        named = {e.split(": ", 2)[1] for e in broken if e.count(": ") >= 2}  # their files
        others = [e for e in check_ladder_dir_with_history(app.settings.ladders_dir,
                                                           LadderHistoryStore(app.engine),
                                                           app.calendars,
                                                           deployment=_bound(app))
                  if not e.startswith(RELEASE_BROKEN) and e.split(": ", 1)[0] not in named]
    except Exception as exc:  # doctor reports, never crashes
        return [f"ladder files could not be checked: {exc}"]
    return broken + others


def run_doctor(app: App, *, host_ms: Callable[[], int] | None = None,
               max_skew_ms: int = DEFAULT_MAX_SKEW_MS) -> list[Check]:
    """``service_layer.doctor.run_checks`` against the live deployment of ``app``."""
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
    at binding (nothing to compare when either side has none yet: ``db upgrade`` stamps
    both).

    Raises:
        ConfigError: the identities differ (the message names both and the commands).
    """
    identity = database_identity(engine)
    if identity is None:
        return
    recorded = binding.database_identity()
    if recorded is not None and recorded != identity:
        raise ConfigError(_identity_mismatch(binding.namespace, recorded, identity))


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


def checkpoint_store_for(engine: sa.Engine) -> CheckpointStore:
    """The ``CheckpointStore`` (``adapters.checkpoints.PostgresCheckpoints``) on ``engine``:
    checkpoints, verification and the retention rows."""
    from escalation.adapters.checkpoints import PostgresCheckpoints

    return PostgresCheckpoints(engine)


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


def case_file_ports_for(engine: sa.Engine, settings: Settings,
                        ladders: Callable[[str, int], Any],
                        calendars: CalendarRegistry) -> CaseFilePorts:
    """The ports of ``service_layer.case_file.export_case_file`` on ``engine``: the ledger
    (trail, search, report rows), the checkpoints, ``ladders`` (``(name, version) ->
    Ladder`` of the released versions) and ``calendars``, the ladder and calendars files,
    and the checkpoint signing key. No Redis is needed.

    Raises:
        ConfigError: no signing key configured (``ESCALATION_CHECKPOINT_KEY_FILE`` /
            ``ESCALATION_CHECKPOINT_KEY``), or one that cannot be read.
    """
    from escalation.adapters.audit_search import PostgresLedgerSearch
    from escalation.adapters.checkpoints import PostgresCheckpoints
    from escalation.adapters.evidence import Ed25519DocumentSigner, EvidenceFiles
    from escalation.adapters.report_queries import PostgresReports
    from escalation.adapters.signing import KEY_ENV, KEY_FILE_ENV, load_private_key
    from escalation.domain.errors import ConfigError

    key = load_private_key()
    if key is None:
        raise ConfigError(f"set {KEY_FILE_ENV} (or {KEY_ENV}) to the checkpoint signing key: "
                          "a case file carries the signed checkpoint digest and is signed")
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
