"""A silent network (packets dropped, no reset) and connection resets at start-up, between
workers and Redis (tests/fault/proxy.py black-hole and refuse modes).

- Black hole for 4 s while escalations come due: every Redis call is bounded well below the
  lease (``Settings.io_timeout_s``), the worker reconnects, and what came due fires within
  lease + poll interval after the network returns -- exactly once.
- Resets while workers start: they retry with backoff instead of exiting; an outage longer
  than ``ESCALATION_STARTUP_TIMEOUT_S`` ends in one error line, exit 1.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.helpers import due_requests, enqueue, worker_output
from tests.fault.proxy import TcpProxy
from tests.fault.support import (
    assert_exactly_once,
    decided_count,
    settled,
    spawn,
    stop,
    wait_until,
    worker_env,
)

pytestmark = [pytest.mark.fault, pytest.mark.slow]

LEASE_S, POLL_S = 5.0, 1.0  # tests.fault.support.WORKER_ARGS


def test_a_black_hole_does_not_stall_a_worker_past_lease_plus_poll(
    app: Any, redis_proxy: TcpProxy, database_url: str, namespace: str
) -> None:
    env = worker_env(redis_proxy.url, database_url, namespace)  # type: ignore[attr-defined]
    (worker,) = workers = [spawn(env, "bh1", batch_size=50)]
    try:
        warm = enqueue(app, due_requests(3, app.scheduler.time()))
        assert wait_until(lambda: settled(app, warm), 60), worker_output(worker)[-3000:]
        ids = enqueue(app, due_requests(20, app.scheduler.time(), past_s=-3.0))  # due in 3 s
        redis_proxy.blackhole = True
        time.sleep(4.0)
        redis_proxy.blackhole = False
        back = time.monotonic()
        done = wait_until(lambda: decided_count(app.engine, ids) == len(ids), 60, 0.05)
        late_s = time.monotonic() - back
        wait_until(lambda: settled(app, ids), 30)
    finally:
        codes = stop(workers)
    logs = worker_output(worker)
    assert redis_proxy.swallowed > 0, "the black hole never swallowed a byte"
    assert done, logs[-3000:]
    assert late_s <= LEASE_S + POLL_S, (late_s, logs[-3000:])
    assert codes == [0], logs[-3000:]
    assert_exactly_once(app, warm + ids)


def test_workers_survive_connection_resets_at_start_up(
    app: Any, redis_proxy: TcpProxy, database_url: str, namespace: str
) -> None:
    env = worker_env(redis_proxy.url, database_url, namespace,  # type: ignore[attr-defined]
                     ESCALATION_STARTUP_TIMEOUT_S="120")
    redis_proxy.refuse = True
    workers = [spawn(env, f"rs{i}") for i in (1, 2, 3)]
    try:
        # every worker meets resets at start-up: wait until each had time to retry
        assert wait_until(lambda: redis_proxy.connections >= 9, 60)
        time.sleep(1.0)
        alive = [p.poll() is None for p in workers]
        redis_proxy.refuse = False
        ids = enqueue(app, due_requests(30, app.scheduler.time()))
        done = wait_until(lambda: settled(app, ids), 60)
    finally:
        codes = stop(workers)
    logs = "\n".join(worker_output(p) for p in workers)
    assert alive == [True, True, True], logs[-3000:]
    assert "startup.retry" in logs
    assert done, logs[-3000:]
    assert codes == [0, 0, 0], logs[-3000:]
    assert_exactly_once(app, ids)


def test_an_outage_longer_than_the_start_up_timeout_is_one_error_line(
    redis_proxy: TcpProxy, database_url: str, namespace: str
) -> None:
    env = worker_env(redis_proxy.url, database_url, namespace,  # type: ignore[attr-defined]
                     ESCALATION_STARTUP_TIMEOUT_S="2")
    redis_proxy.refuse = True
    (worker,) = [spawn(env, "rs-timeout")]
    t0 = time.monotonic()
    try:
        code = worker.wait(timeout=60)
    finally:
        stop([worker])
    took = time.monotonic() - t0
    out = worker_output(worker)
    errors = [x for x in out.splitlines() if x.startswith("error:")]
    assert code == 1, out[-2000:]
    assert len(errors) == 1 and "cannot reach Redis" in errors[0], out[-2000:]
    assert "Traceback" not in out
    assert took < 30, took
