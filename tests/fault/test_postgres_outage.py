"""PostgreSQL stopped for 30 s while workers run (docs/fault-injection.md).

Our OWN PostgreSQL (embedded, under a tmp home) is stopped (fast shutdown) while two workers
fire a stream of escalations coming due. During the outage nothing may be applied without its
record: every seq a Redis payload shows must be in the ledger afterwards. After the restart
the workers recover by themselves (backoff on OperationalError, ``pool_pre_ping`` drops the
dead pooled connections) and every due escalation is decided exactly once.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.e2e.helpers import due_requests, enqueue, worker_output
from tests.fault.conftest import AppFactory
from tests.fault.support import assert_exactly_once, settled, spawn, stop, wait_until, worker_env

pytestmark = [pytest.mark.fault, pytest.mark.slow]

OUTAGE_S = 30


def _postmaster_pid(home: Path) -> int:
    return int((home / "pg" / "postmaster.pid").read_text().splitlines()[0])


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_postgres_down_30s_workers_apply_nothing_unrecorded_and_recover_by_themselves(
    private_pg: dict[str, Any], namespace: str, make_app: AppFactory
) -> None:
    from escalation.adapters.embedded import ensure_services

    home: Path = private_pg["home"]
    app = make_app(private_pg["redis_url"], private_pg["database_url"], namespace)
    now = app.scheduler.time()
    # 100 due now, 200 more coming due one every 0.2 s: work before, during and after
    reqs = due_requests(100, now)
    for i in range(200):
        reqs += due_requests(1, now + timedelta(seconds=2 + 0.2 * i), past_s=0)
    ids = enqueue(app, reqs)
    env = worker_env(private_pg["redis_url"], private_pg["database_url"], namespace)
    workers = [spawn(env, f"w{i}", batch_size=10) for i in (1, 2)]
    seen: set[tuple[str, int]] = set()

    def sample() -> None:
        pipe = app.redis.pipeline(transaction=False)
        for d in ids:
            pipe.hget(app.scheduler.keys_for(d).payload(d), "seq")
        for d, s in zip(ids, pipe.execute(), strict=True):
            if s is not None:
                seen.add((str(d), int(s)))

    try:
        # stop PostgreSQL only once both workers are past their start-up schema check (a
        # worker started during an outage exits with the database error instead)
        assert wait_until(lambda: all("worker.started" in worker_output(p) for p in workers), 60)
        time.sleep(2)
        pid = _postmaster_pid(home)
        os.kill(pid, signal.SIGINT)  # fast shutdown: running transactions are aborted
        assert wait_until(lambda: _gone(pid), 30)
        end = time.monotonic() + OUTAGE_S
        while time.monotonic() < end:
            sample()
            time.sleep(1)
        dead = [[ln for ln in worker_output(p).splitlines() if "escalation/" in ln or "Error" in ln]
                for p in workers if p.poll() is not None]
        assert not dead, f"a worker died during the outage: {dead}"
        ensure_services(home)  # same data directory, same socket: same URL
        recovered = wait_until(lambda: settled(app, ids), 120, interval_s=1)
        sample()
    finally:
        codes = stop(workers)
    logs = "\n".join(worker_output(p) for p in workers)
    assert recovered, logs[-3000:]
    assert codes == [0, 0]
    assert "worker.backoff" in logs
    with app.engine.connect() as conn:
        ledger = {(str(d), int(s)) for d, s in conn.execute(sa.text(
            "SELECT dispute_id, seq FROM escalation_audit WHERE dispute_id = ANY(:ids)"),
            {"ids": ids})}
    unrecorded = seen - ledger
    assert not unrecorded, f"Redis showed seqs PostgreSQL never recorded: {sorted(unrecorded)[:5]}"
    # A record whose apply was lost (connection cut / PostgreSQL gone before the reply) is
    # applied later through fire.py's STALE path, which then sends its notification.
    assert_exactly_once(app, ids)
