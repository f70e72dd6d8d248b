"""A slow, flaky network between the workers and Redis (tests/fault/proxy.py).

Workers talk to Redis through a TCP proxy adding 30 ms per forwarded chunk, which then resets
every connection once a second for 8 s. A script call cut off mid-flight may have run or not:
a lost claim leaves its members leased until the lease ends; a re-sent apply is refused by
the seq guard -- exactly once in effect either way.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from tests.e2e.helpers import due_requests, enqueue, worker_output
from tests.fault.proxy import TcpProxy
from tests.fault.support import assert_exactly_once, settled, spawn, stop, wait_until, worker_env

pytestmark = [pytest.mark.fault, pytest.mark.slow]


def test_latency_and_dropped_redis_connections_keep_exactly_once(
    app: Any, redis_proxy: TcpProxy, database_url: str, namespace: str
) -> None:
    now = app.scheduler.time()
    reqs = due_requests(100, now)
    for i in range(200):
        reqs += due_requests(1, now + timedelta(seconds=1 + 0.05 * i), past_s=0)
    ids = enqueue(app, reqs)
    redis_proxy.latency_s = 0.03
    env = worker_env(redis_proxy.url, database_url, namespace)  # type: ignore[attr-defined]
    workers = [spawn(env, f"w{i}", batch_size=10) for i in (1, 2)]
    try:
        time.sleep(1.5)
        for _ in range(8):
            redis_proxy.drop_all()
            time.sleep(1)
        redis_proxy.latency_s = 0.0
        done = wait_until(lambda: settled(app, ids), 60)
    finally:
        codes = stop(workers)
    logs = "\n".join(worker_output(p) for p in workers)
    assert done, logs[-3000:]
    assert redis_proxy.dropped > 0
    assert codes == [0, 0], logs[-3000:]
    # A record whose apply was lost (connection cut / PostgreSQL gone before the reply) is
    # applied later through fire.py's STALE path, which then sends its notification.
    assert_exactly_once(app, ids)
