"""Wiring: turn :class:`Settings` into the object graph (no globals, nothing at import time).

``build(settings)`` resolves the server URLs (configured ones, or the embedded Valkey and
PostgreSQL under ``settings.home``), creates the Redis client, the SQLAlchemy engine, the
scheduler, the audit store, the ladder catalog and the calendars. The ``*_for(app)``
functions wire the worker's other use cases (warnings, dead letters, maintenance) to the
adapters of an App: the one place where service-layer objects meet adapters.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.calendar_files import load_calendars
from escalation.adapters.db import check_at_head, make_engine, normalize_url, upgrade_to_head
from escalation.adapters.ladder_files import LadderCatalog, check_ladder_dir_with_history
from escalation.adapters.ladder_history import LadderHistoryStore
from escalation.adapters.leader_lease import LeaderLease
from escalation.adapters.maintenance_runs import PostgresMaintenanceRuns
from escalation.adapters.probes import ServerProbe
from escalation.adapters.redis_client import OUTAGE_ERRORS, make_redis
from escalation.adapters.redis_layout import check_shard_count
from escalation.adapters.redis_reliability import ReliabilityRedis
from escalation.adapters.redis_scheduler import RedisScheduler
from escalation.adapters.redis_warnings import RedisWarnings
from escalation.domain.calendars import CalendarRegistry
from escalation.domain.errors import SchemaNotAtHead
from escalation.domain.escalation import Escalation
from escalation.domain.timeutil import from_ms
from escalation.logs import get_logger
from escalation.service_layer.dead_letters import DeadLetters
from escalation.service_layer.doctor import DEFAULT_MAX_SKEW_MS, Check, DoctorDeps, run_checks
from escalation.service_layer.maintenance import Job, Maintenance, log_dead_letters
from escalation.service_layer.priority import weight_fn
from escalation.service_layer.reconcile import reconcile
from escalation.service_layer.warnings import schedule_warnings
from escalation.settings import Settings

log = get_logger(__name__)


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
    ladders: LadderCatalog
    calendars: CalendarRegistry
    actor: str

    def close(self) -> None:
        """Close the Redis pool and dispose of the engine."""
        self.redis.close()
        self.engine.dispose()


def _check_layout(client: redis.Redis, settings: Settings) -> None:
    """Refuse a shard count other than the namespace's recorded one (adapters/redis_layout).
    Redis away at start: not checked here (a worker starts and backs off as before)."""
    try:
        check_shard_count(client, settings.namespace, settings.shards)
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


def build(
    settings: Settings,
    *,
    check_schema: bool = True,
    actor: str | None = None,
    strict_ladders: bool = False,
    **_: Any,
) -> App:
    """Build the App for ``settings``.

    Args:
        check_schema: refuse to start unless the database is at the Alembic head (the
            embedded database, which is ours, is upgraded instead).
        strict_ladders: refuse to start if any ladder file is invalid (worker, enqueue,
            import); otherwise invalid files are skipped and listed in ``ladders.errors``.
        actor: who acts (worker id or admin name); defaults to a fresh worker id.

    Raises:
        SchemaNotAtHead: ``check_schema`` and the database is behind (run ``db upgrade``).
        LadderError: a ladder file under ``settings.ladders_dir`` is invalid.
    """
    urls = resolve_urls(settings)
    # one server, a Cluster or a Sentinel set, by URL scheme (adapters/redis_client.py);
    # decode_responses, encoding_errors="replace", socket timeouts, health checks included
    client = make_redis(urls.redis_url)
    engine = make_engine(urls.database_url)
    if check_schema:
        ensure_schema(engine, urls)
    ladders = LadderCatalog.from_dir(settings.ladders_dir, strict=strict_ladders)
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
        calendars=load_calendars(settings.calendars_file),
        actor=actor or make_worker_id(settings),
    )


# --------------------------------------------------------------------------- use-case wiring
def reliability_for(app: App) -> ReliabilityRedis:
    """Reliability reads and scripts on ``app``'s namespace, shards and priority aging."""
    return ReliabilityRedis(app.redis, app.settings.namespace, app.settings.shards,
                            aging_ms=app.settings.priority_aging_s * 1000)


def warnings_for(app: App) -> RedisWarnings:
    """The warnings queue matching ``app.scheduler``'s namespace and shards."""
    return RedisWarnings(app.redis, app.scheduler.namespace, app.scheduler.shards)


def schedule_for(app: App) -> Callable[[Sequence[Escalation]], None]:
    """A hook ``escalations -> None`` scheduling their pre-breach warnings (the
    ``on_scheduled`` of enqueue and fire_due)."""
    queue = warnings_for(app)

    def hook(escalations: Sequence[Escalation]) -> None:
        schedule_warnings(escalations, warnings=queue, ladders=app.ladders,
                          calendars=app.calendars)

    return hook


def dead_letters_for(app: App) -> DeadLetters:
    """DeadLetters wired from an App (the worker's poison hook, the ``dead`` commands)."""
    return DeadLetters(rel=reliability_for(app), scheduler=app.scheduler, store=app.store,
                       actor=app.actor)


def maintenance_jobs(app: App, rel: ReliabilityRedis) -> list[Job]:
    """reconcile (5 min), dead-letter alerts (1 min), ledger partition upkeep (1 h)."""
    from escalation.adapters.partitions import ensure_partitions

    def do_reconcile() -> dict[str, Any]:
        rep = reconcile(scheduler=app.scheduler, store=app.store, redis_side=rel)
        return {"checked_db": rep.checked_db, "repaired": rep.count(repaired=True),
                "differences": rep.count()}

    def partitions() -> dict[str, Any]:
        ahead = int(app.settings.audit_partitions_ahead)
        made = ensure_partitions(app.engine, from_ms(rel.now_ms()), ahead)
        return {"created": list(made)}

    return [Job("reconcile", 300, do_reconcile),
            Job("dead_letter_alerts", 60, lambda: log_dead_letters(rel.dead_count())),
            Job("partitions", 3600, partitions)]


def maintenance_for(app: App, *, ttl_ms: int | None = None) -> Maintenance:
    """The worker's Maintenance: lease = 3 x lease_ms (>= 15 s), the default jobs."""
    rel = reliability_for(app)
    ttl = ttl_ms or max(15_000, 3 * int(app.settings.lease_ms))
    return Maintenance(runs=PostgresMaintenanceRuns(app.engine),
                       lease=LeaderLease(rel, ttl_ms=ttl,
                                         redis_ms=app.scheduler.estimated_now_ms),
                       jobs=maintenance_jobs(app, rel),
                       actor=app.actor)


def ladder_file_problems(app: App) -> list[str]:
    """Invalid ladder files, plus edited files of applied versions (the ladder history's
    checksums); a failure of the history check is reported as a problem, never raised."""
    errors = list(app.ladders.errors)
    try:
        errors += [e for e in check_ladder_dir_with_history(app.settings.ladders_dir,
                                                     LadderHistoryStore(app.engine))
                   if e not in errors and "checksum" in e]
    except Exception as exc:  # doctor reports, never crashes
        errors.append(f"ladder check could not run: {exc}")
    return errors


def run_doctor(app: App, *, host_ms: Callable[[], int] | None = None,
               max_skew_ms: int = DEFAULT_MAX_SKEW_MS) -> list[Check]:
    """``service_layer.doctor.run_checks`` against the live deployment of ``app``."""
    deps = DoctorDeps(store=app.store, redis_side=reliability_for(app),
                      probe=ServerProbe(app.redis, app.engine),
                      scheduler_stats=app.scheduler.stats,
                      ladder_problems=lambda: ladder_file_problems(app))
    return run_checks(deps, host_ms=host_ms, max_skew_ms=max_skew_ms)
