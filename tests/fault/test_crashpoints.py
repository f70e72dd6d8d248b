"""Worker SIGKILL at each boundary of the firing protocol (docs/architecture.md, crash table).

A victim worker SIGKILLs itself the n-th time it passes a boundary (``ESCALATION_CRASHPOINT``,
see ``escalation.entrypoints.worker.crashpoint_from_env``); a healthy worker runs alongside
and finishes the job once the victim's leases (5 s) expire. Every run asserts the suite's
invariants (tests/fault/support.py).
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from typing import Any

import pytest

from tests.e2e.helpers import due_requests, enqueue
from tests.fault.support import (
    assert_exactly_once,
    check,
    decided_count,
    output,
    review_entries,
    settled,
    spawn,
    stop,
    wait_until,
    worker_env,
)
from tests.helpers import run_cli

pytestmark = [pytest.mark.fault, pytest.mark.slow]

N = 200
BOUNDARIES = ("after_claim", "before_record", "after_record", "after_apply")


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_worker_killed_at_a_protocol_boundary_every_escalation_is_decided_exactly_once(
    app: Any, redis_url: str, database_url: str, namespace: str, boundary: str, n: int
) -> None:
    ids = enqueue(app, due_requests(N, app.scheduler.time()))
    env = worker_env(redis_url, database_url, namespace,
                     ESCALATION_SHARDS=str(app.settings.shards))
    victim = spawn(dict(env, ESCALATION_CRASHPOINT=f"{boundary}:{n}"), "victim")
    assert victim.wait(timeout=60) == -signal.SIGKILL, output(victim)[-2000:]
    healthy = spawn(env, "healthy")
    try:
        done = wait_until(lambda: settled(app, ids), timeout_s=60)
    finally:
        codes = stop([healthy])
    assert done, f"only {decided_count(app.engine, ids)} of {N} decided: {output(healthy)[-3000:]}"
    assert codes == [0]
    assert_exactly_once(app, ids)


def test_decision_recorded_by_a_worker_killed_before_apply_is_still_notified(
    app: Any, redis_url: str, database_url: str, namespace: str
) -> None:
    """The next claimer applies the recorded state through fire.py's STALE path and sends
    the notification the dead worker never sent (seq-guarded: at most once)."""
    ids = enqueue(app, due_requests(40, app.scheduler.time()))
    env = worker_env(redis_url, database_url, namespace,
                     ESCALATION_SHARDS=str(app.settings.shards))
    victim = spawn(dict(env, ESCALATION_CRASHPOINT="after_record:1"), "victim")
    assert victim.wait(timeout=60) == -signal.SIGKILL, output(victim)[-2000:]
    healthy = spawn(env, "healthy")
    try:
        assert wait_until(lambda: settled(app, ids), timeout_s=60)
    finally:
        stop([healthy])
    verdict = check(app, ids)
    assert not verdict.unnotified, f"{len(verdict.unnotified)} decisions never notified"


def test_crash_after_record_then_reconcile_notifies_every_decision_exactly_once(
    scratch: Any, make_app: Any, redis_url: str, namespace: str
) -> None:
    """SIGKILL after record (before apply), wait past the lease, `escalation reconcile` repairs
    the batch from PostgreSQL, then a worker drains: every decision is notified exactly once
    (reconcile sends the unapplied decisions' notifications, seq-guarded, and the worker does
    not send them again).

    A database of its own: reconcile schedules every pending escalation of its database (one
    database serves one namespace, docs/adr/0009-one-namespace-per-database.md). On the shared
    test database it also pulled in other tests' leftovers (one pinned to a ladder file that
    test had deleted), which kept the worker busy dead-lettering them past the timeout."""
    database_url = scratch.url.render_as_string(hide_password=False)
    app = make_app(redis_url, database_url, namespace)
    ids = enqueue(app, due_requests(200, app.scheduler.time()))
    env = worker_env(redis_url, database_url, namespace)
    victim = spawn(dict(env, ESCALATION_CRASHPOINT="after_record:1"), "victim")
    assert victim.wait(timeout=60) == -signal.SIGKILL, output(victim)[-2000:]
    time.sleep(6)  # the victim's lease (5 s) runs out
    res = run_cli(env, "reconcile")
    assert res.returncode == 0, res.stderr[-2000:]
    healthy = spawn(env, "healthy")
    try:
        assert wait_until(lambda: settled(app, ids), timeout_s=90), output(healthy)[-3000:]
    finally:
        stop([healthy])
    assert_exactly_once(app, ids)
    counts = Counter(f["idempotency_key"] for f in review_entries(app))
    twice = {k: c for k, c in counts.items() if c > 1}
    assert not twice, f"{len(twice)} decisions notified more than once"
    assert not check(app, ids).unnotified
