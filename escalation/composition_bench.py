"""Wiring of the benchmarks (``escalation bench``, ``bench/``): the servers by URL, and the
few adapter details a benchmark reads or seeds directly.

A benchmark sets up load the way no use case does (a namespace's review streams filled in
one pipeline, the bare cost of a ZSET member and its HASH, the ``applied`` counters summed
over shards), so it needs the key layout and the payload encoding; it gets them here,
typed, and never imports an adapter (docs/architecture.md, "Layers").
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

import redis
import sqlalchemy as sa

from escalation.adapters.db import make_engine, normalize_url
from escalation.adapters.reconcile_state import PostgresLedgerChanges, RedisReconcileState
from escalation.adapters.redis_client import make_redis
from escalation.adapters.redis_keys import Keys, shard_of
from escalation.adapters.redis_scheduler import LEGACY_NAMES, escalation_to_payload
from escalation.adapters.token_store import PostgresTokenStore
from escalation.adapters.webhook import sign
from escalation.bootstrap import App
from escalation.domain.escalation import Escalation
from escalation.ports import TokenStore


def database_url(url: str) -> str:
    """A SQLAlchemy psycopg 3 URL for any PostgreSQL URL."""
    return normalize_url(url)


def small_engine(url: str) -> sa.Engine:
    """A one-connection engine on ``url`` (the caller disposes of it)."""
    return make_engine(url, pool_size=1)


def redis_client(url: str) -> redis.Redis:
    """A client (decode_responses) on ``url``: one server, a Cluster or a Sentinel primary."""
    return make_redis(url)


def token_store_on(engine: sa.Engine) -> TokenStore:
    """The API tokens (``ports.TokenStore``) on ``engine``."""
    return PostgresTokenStore(engine)


def keys(namespace: str, shard: int) -> Keys:
    """The Redis key names of ``namespace``'s shard ``shard``."""
    return Keys(namespace, shard)


def shard_for(dispute_id: str, shards: int) -> int:
    """The shard holding ``dispute_id`` among ``shards``."""
    return shard_of(dispute_id, shards)


def webhook_signature(key: bytes, msg_id: str, timestamp_s: int, body: bytes) -> str:
    """The Standard Webhooks v1 signature header value a delivery carries."""
    return sign(key, msg_id, timestamp_s, body)


def payload_fields(escalation: Escalation) -> dict[str, str]:
    """The payload HASH fields the scheduler writes for ``escalation``."""
    return escalation_to_payload(escalation)


def long_field_names() -> Mapping[str, str]:
    """Payload field (one letter) -> the long name earlier versions wrote."""
    return LEGACY_NAMES


def applied_count(client: Any, namespace: str, shards: int = 1) -> int:
    """The ``applied`` counters of every shard's stats hash, summed."""
    return sum(int(client.hget(Keys(namespace, s).stats, "applied") or 0)
               for s in range(shards))


def reconcile_state_for(app: App) -> RedisReconcileState:
    """The incremental reconcile's state in ``app``'s Redis (watermark, sweep position)."""
    return RedisReconcileState(app.redis, app.settings.namespace)


def ledger_horizon(app: App) -> datetime:
    """The instant before which no ledger row can still commit (the reconcile watermark)."""
    return PostgresLedgerChanges(app.engine).horizon()


def drop_scheduled(app: App, dispute_id: UUID) -> None:
    """Delete ``dispute_id``'s payload HASH and pending member from ``app``'s Redis, as a lost
    write would (the ledger keeps it: reconcile schedules it again)."""
    keys_ = app.scheduler.keys_for(dispute_id)
    app.redis.delete(keys_.payload(dispute_id))
    app.redis.zrem(keys_.pending, str(dispute_id))


def analyze_ledger(app: App) -> None:
    """``ANALYZE`` the projection and the ledger in ``app``'s database (what autovacuum does
    after a bulk load)."""
    with app.engine.connect() as conn:
        conn.execute(sa.text("ANALYZE escalation_state"))
        conn.execute(sa.text("ANALYZE escalation_audit"))
        conn.commit()


def close_database_connections(app: App) -> None:
    """Close every pooled PostgreSQL connection of ``app`` (each backend flushes its table
    counters on exit; the next use opens a new one)."""
    app.engine.dispose()
