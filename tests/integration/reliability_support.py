"""Fixtures for the reliability tests (docs/reliability.md): an App on its own database.

Reconcile and doctor compare *all* of PostgreSQL with one Redis namespace, so they need a
database no other test writes to. The database is created here and dropped afterwards (only
databases these fixtures created are dropped).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.conftest import scratch_database


@pytest.fixture()
def own_database_url(server_urls: tuple[str, str]) -> Iterator[str]:
    """A database created for one test at the Alembic head; dropped afterwards."""
    with scratch_database(server_urls[1], "escalation_rel") as url:
        yield url


@pytest.fixture()
def own_app(redis_url: str, own_database_url: str, namespace: str,
            redis_client: redis.Redis) -> Iterator[Any]:
    """An App on this test's own database and Redis namespace."""
    from escalation.bootstrap import build
    from escalation.settings import get_settings

    settings = get_settings(redis_url=redis_url, database_url=own_database_url,
                            namespace=namespace, poll_interval_s=1, lock_ttl_s=5,
                            log_format="json")
    a = build(settings, actor="test-worker")
    yield a
    a.close()


def reliability_redis(app: Any) -> Any:
    """ReliabilityRedis on the app's namespace."""
    from escalation.adapters.redis_reconcile_notify import ReliabilityRedis

    return ReliabilityRedis(app.redis, app.settings.namespace, app.settings.shards)


def delete_namespace(client: redis.Redis, namespace: str) -> int:
    """Delete every key of one test namespace (the FLUSHDB of this namespace). Returns count."""
    keys = list(client.scan_iter(match=f"*{{{namespace}:*", count=1000))
    for i in range(0, len(keys), 500):
        client.delete(*keys[i:i + 500])
    return len(keys)
