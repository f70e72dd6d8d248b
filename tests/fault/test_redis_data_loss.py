"""Redis restarted with its data lost, then reconcile (docs/fault-injection.md).

Our OWN Valkey (no persistence) is SIGKILLed and restarted empty; ``reconcile`` rebuilds the
schedule from PostgreSQL; workers then fire everything pending exactly once.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.e2e.helpers import due_requests, enqueue
from tests.fault.conftest import AppFactory, PrivateValkey
from tests.fault.support import assert_exactly_once, settled, spawn, stop, wait_until, worker_env

pytestmark = [pytest.mark.fault, pytest.mark.slow]


def test_redis_data_loss_reconcile_restores_every_pending_escalation_and_all_fire_once(
    private_valkey: PrivateValkey, fresh_database_url: str, namespace: str, make_app: AppFactory
) -> None:
    from escalation.adapters.redis_reconcile_notify import ReliabilityRedis
    from escalation.service_layer.reconcile import FullReconcile, ReconcilePorts, reconcile

    app = make_app(private_valkey.url, fresh_database_url, namespace)
    now = app.scheduler.time()
    due = enqueue(app, due_requests(300, now))
    later = enqueue(app, due_requests(50, now + timedelta(minutes=10)))
    pending = app.scheduler.keys_for(due[0]).pending
    scores = {m: s for m, s in app.redis.zrange(pending, 0, -1, withscores=True)}
    assert len(scores) == 350

    private_valkey.kill()
    private_valkey.start()
    assert app.redis.zcard(pending) == 0  # everything lost

    rel = ReliabilityRedis(app.redis, namespace, app.settings.shards)
    report = reconcile(FullReconcile(), ReconcilePorts(app.scheduler, app.store, rel))
    assert report.checked_db >= 350
    restored = {m: s for m, s in app.redis.zrange(pending, 0, -1, withscores=True)}
    assert restored == scores  # 100 % restored, with their due times
    assert all(app.scheduler.payload(d) is not None for d in later)

    env = worker_env(private_valkey.url, fresh_database_url, namespace)
    workers = [spawn(env, f"w{i}") for i in (1, 2)]
    try:
        assert wait_until(lambda: settled(app, due), 60)
    finally:
        codes = stop(workers)
    assert codes == [0, 0]
    assert_exactly_once(app, due)
    assert all(len(app.store.trail(d)) == 1 for d in later)  # not due: untouched
