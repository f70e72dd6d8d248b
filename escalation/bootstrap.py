"""Wiring: turn :class:`Settings` into the object graph (no globals, nothing at import time).

``build(settings)`` resolves the server URLs (configured ones, or the embedded Valkey and
PostgreSQL under ``settings.home``), creates the Redis client, the SQLAlchemy engine, the
scheduler, the audit store, the ladder catalog and the calendars.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any

import redis
import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.calendar_files import load_institution_calendars
from escalation.adapters.db import check_at_head, make_engine, normalize_url, upgrade_to_head
from escalation.adapters.ladder_files import LadderCatalog
from escalation.adapters.redis_scheduler import RedisScheduler
from escalation.domain.calendars import CalendarRegistry
from escalation.domain.errors import SchemaNotAtHead
from escalation.settings import Settings


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
    client = redis.Redis.from_url(
        urls.redis_url, decode_responses=True, socket_timeout=30, socket_connect_timeout=5,
        # a non-UTF-8 byte in one payload must not crash every worker that claims it: it
        # decodes as U+FFFD, fails validation and takes the poison -> dead-letter path
        encoding_errors="replace",
        health_check_interval=30,
    )
    engine = make_engine(urls.database_url)
    if check_schema:
        ensure_schema(engine, urls)
    ladders = LadderCatalog.from_dir(settings.ladders_dir, strict=strict_ladders)
    scheduler = RedisScheduler(client, namespace=settings.namespace, shards=settings.shards)
    # issue 4 C: materiality weights written at enqueue, aging used by claim.lua
    from escalation.service_layer.priority import weight_fn

    scheduler.priority = weight_fn(ladders)
    scheduler.aging_ms = settings.priority_aging_s * 1000
    return App(
        settings=settings,
        urls=urls,
        redis=client,
        engine=engine,
        scheduler=scheduler,
        store=PostgresAuditStore(engine),
        ladders=ladders,
        calendars=load_institution_calendars(
            settings.calendars_file, settings.institution_calendar, settings.institution_timezone
        ),
        actor=actor or make_worker_id(settings),
    )
