"""Changing the number of shards: refused on a laid-out namespace; the documented migration
(new namespace + reconcile) strands nothing (docs/operations.md)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import timedelta
from typing import Any

import pytest
import redis

from escalation.adapters.redis_layout import ShardCountMismatch, layout_key
from escalation.adapters.redis_reconcile_notify import ReliabilityRedis
from escalation.service_layer.core import CorePorts
from escalation.service_layer.fire import FireDue, fire_due
from escalation.service_layer.reconcile import FullReconcile, ReconcilePorts, reconcile
from tests.e2e.helpers import due_requests, enqueue
from tests.integration import reliability_support as support

own_database_url = support.own_database_url  # fixture


def _build(redis_url: str, database_url: str, namespace: str, shards: int) -> Any:
    from escalation.bootstrap import build
    from escalation.settings import get_settings

    return build(get_settings(redis_url=redis_url, database_url=database_url,
                              namespace=namespace, shards=shards, log_format="json"),
                 actor="test-worker")


def _cleanup(client: redis.Redis, namespace: str) -> None:
    for key in client.scan_iter(match=f"*{{{namespace}:*", count=1000):
        client.delete(key)


def test_first_use_records_the_shard_count_and_another_count_is_refused(
    redis_url: str, own_database_url: str, namespace: str, redis_client: redis.Redis
) -> None:
    app = _build(redis_url, own_database_url, namespace, 2)
    try:
        ids = enqueue(app, due_requests(40, app.scheduler.time()))
        assert redis_client.get(layout_key(namespace)) == "2"
        with pytest.raises(ShardCountMismatch, match=r"laid out in 2 shards but "
                                                     r"ESCALATION_SHARDS=4"):
            _build(redis_url, own_database_url, namespace, 4)
        # the same count is accepted again, and every escalation is still where it was put
        same = _build(redis_url, own_database_url, namespace, 2)
        assert all(same.scheduler.payload(d) is not None for d in ids)
        same.close()
    finally:
        app.close()


def test_cli_refuses_a_changed_shard_count_with_one_line_and_exit_2(
    redis_url: str, own_database_url: str, namespace: str, cli_env: dict[str, str]
) -> None:
    _build(redis_url, own_database_url, namespace, 3).close()
    env = dict(cli_env, ESCALATION_DATABASE_URL=own_database_url, ESCALATION_SHARDS="5")
    proc = subprocess.run([sys.executable, "-m", "escalation", "status"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "laid out in 3 shards" in lines[0], proc.stderr


def test_migration_to_a_new_shard_count_under_a_new_namespace_strands_nothing(
    redis_url: str, own_database_url: str, namespace: str, redis_client: redis.Redis
) -> None:
    """stop workers -> new namespace with the new count -> reconcile -> drain."""
    old = _build(redis_url, own_database_url, namespace, 2)
    now = old.scheduler.time()
    due = enqueue(old, due_requests(30, now))
    later = enqueue(old, due_requests(20, now + timedelta(hours=2)))
    old.close()
    new_ns = f"t{uuid.uuid4().hex[:12]}"
    new = _build(redis_url, own_database_url, new_ns, 8)
    try:
        rel = ReliabilityRedis(new.redis, new_ns, 8, aging_ms=new.scheduler.aging_ms)
        report = reconcile(FullReconcile(), ReconcilePorts(new.scheduler, new.store, rel))
        assert report.count(repaired=True) == 50
        for d in due + later:  # each one in the shard the new count assigns it
            keys = new.scheduler.keys_for(d)
            assert redis_client.zscore(keys.pending, str(d)) is not None
            assert new.scheduler.payload(d) is not None
        assert len({new.scheduler.keys_for(d).shard for d in due + later}) > 2
        fired = fire_due(
            FireDue(batch_size=500, lease_ms=5000, worker_id="w-new"),
            CorePorts(scheduler=new.scheduler, store=new.store, ladders=new.ladders,
                      calendars=new.calendars),
        )
        assert fired.claimed == 30 and fired.recorded == 30
        assert all(new.store.get(i)[0].tier == "senior" for i in due)
        assert all(new.store.get(i)[0].tier == "standard" for i in later)
    finally:
        new.close()
        _cleanup(redis_client, new_ns)
