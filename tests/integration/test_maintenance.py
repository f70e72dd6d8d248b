"""Recurring maintenance exactly once across workers; leader lease; catch-up after downtime
(docs/reliability.md, "Maintenance")."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import sqlalchemy as sa

from escalation.adapters.leader_lease import LeaderLease, LeaseTerms
from escalation.adapters.maintenance_runs import PostgresMaintenanceRuns, runs
from escalation.service_layer.maintenance import Job, Maintenance
from tests.integration.reliability_support import reliability_redis

HOUR_MS = 3_600_000


class FakeClock:
    """Monotonic seconds under test control (the lease's own clock, not a wall clock)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _job(name: str, counter: list[int], lock: threading.Lock) -> Job:
    def fn() -> dict[str, Any]:
        with lock:
            counter.append(1)
        return {}

    return Job(name, 60, fn)


def test_four_contenders_one_leader_and_each_occurrence_runs_once(
    app: Any,
) -> None:
    rel = reliability_redis(app)
    name = f"job-{uuid.uuid4().hex[:8]}"
    counter: list[int] = []
    lock = threading.Lock()
    makers = [Maintenance(runs=PostgresMaintenanceRuns(app.engine),
                          lease=LeaderLease(rel, LeaseTerms(ttl_ms=10_000)),
                          jobs=[_job(name, counter, lock)], actor=f"w{i}") for i in range(4)]
    leaders = [m.lease.poll() for m in makers]
    assert leaders.count(True) == 1
    base = rel.now_ms() // 60_000 * 60_000
    barrier = threading.Barrier(4)
    ran: list[list[str]] = [[] for _ in makers]

    def contend(i: int) -> None:
        for occ in range(5):  # five occurrences, all four race on each (forced: PG guard)
            barrier.wait()
            ran[i] += makers[i].tick(base + occ * 60_000 + 5, force=True)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(counter) == 5  # exactly one run per occurrence
    assert sum(len(r) for r in ran) == 5
    row = next(r for r in runs(app.engine) if r["job"] == name)
    assert row["runs"] == 5 and row["last_status"] == "ok"


def test_after_an_hour_of_downtime_the_job_runs_once_not_sixty_times(app: Any) -> None:
    rel = reliability_redis(app)
    name = f"job-{uuid.uuid4().hex[:8]}"
    counter: list[int] = []
    m = Maintenance(runs=PostgresMaintenanceRuns(app.engine),
                           lease=LeaderLease(rel), jobs=[_job(name, counter,
                    threading.Lock())], actor="w")
    now = rel.now_ms()
    assert m.tick(now - HOUR_MS, force=True) == [name]
    assert m.tick(now, force=True) == [name]  # recovery: once
    assert m.tick(now, force=True) == []  # same occurrence: not again
    assert len(counter) == 2
    row = next(r for r in runs(app.engine) if r["job"] == name)
    assert row["missed"] == 59 and row["details"]["missed"] == 59


def test_leader_that_cannot_renew_stops_acting_before_its_lease_ends(app: Any) -> None:
    rel = reliability_redis(app)
    clock = FakeClock()
    lease = LeaderLease(rel, LeaseTerms(ttl_ms=10_000, margin=0.2), clock=clock)
    other = LeaderLease(rel, LeaseTerms(ttl_ms=10_000))
    assert lease.poll() and not other.poll()
    clock.t += 7.9
    assert lease.is_leader()
    clock.t += 0.2  # 8.1 s > 10 s * (1 - 0.2) without renewal: stops acting
    assert not lease.is_leader()
    assert app.redis.pttl(lease.key) > 0  # while its lease still exists in Redis
    counter: list[int] = []
    m = Maintenance(runs=PostgresMaintenanceRuns(app.engine),
                           lease=lease, jobs=[_job("never", counter,
                    threading.Lock())], actor="w")
    assert m.tick() == [] and counter == []


def test_renew_checks_the_token_and_release_is_compare_and_delete(app: Any) -> None:
    rel = reliability_redis(app)
    a = LeaderLease(rel, LeaseTerms(ttl_ms=5_000))
    assert a.poll()
    app.redis.pexpire(a.key, 1_000)
    assert a.poll() and app.redis.pttl(a.key) > 4_000  # renewed: expiry reset to the lease
    app.redis.set(a.key, "someone-else", px=5_000)  # lease lost and taken over
    assert not a.poll()  # the token read back is not its own: not leader any more
    assert not a.is_leader()
    assert not a.release()
    assert app.redis.get(a.key) == "someone-else"
    app.redis.delete(a.key)
    b = LeaderLease(rel, LeaseTerms(ttl_ms=5_000))
    assert b.poll() and b.release() and app.redis.get(b.key) is None


def test_every_lease_poll_is_one_redis_command(app: Any) -> None:
    """Acquire (``SET NX``), renew (``GETEX``) and a failed acquire each send one command:
    the idle worker's budget (docs/performance.md, "Idle worker") counts on it."""
    rel = reliability_redis(app)
    sent: list[str] = []
    real = app.redis.execute_command

    def counted(*args: Any, **kw: Any) -> Any:
        sent.append(str(args[0]).upper())
        return real(*args, **kw)

    a, b = LeaderLease(rel, LeaseTerms(ttl_ms=5_000)), LeaderLease(rel, LeaseTerms(ttl_ms=5_000))
    app.redis.execute_command = counted
    try:
        assert a.poll()
        assert a.poll()
        assert not b.poll()
    finally:
        app.redis.execute_command = real
    assert sent == ["SET", "GETEX", "SET"]
    a.release()


def test_a_leader_whose_lease_expired_unheld_takes_it_back_at_once(app: Any) -> None:
    rel = reliability_redis(app)
    a = LeaderLease(rel, LeaseTerms(ttl_ms=5_000))
    assert a.poll()
    app.redis.delete(a.key)  # expired, nobody took it
    assert a.poll() and app.redis.get(a.key) == a.token
    a.release()


def test_migration_0005_creates_maintenance_runs(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        cols = {r[0] for r in conn.execute(sa.text(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'maintenance_runs'"))}
    assert {"job", "last_occurrence", "runs", "missed", "last_leader"} <= cols


def test_a_tick_reads_the_clock_once_and_the_worker_lease_sends_no_time(app: Any) -> None:
    """An idle worker must not add Redis TIME calls beyond the scheduler's 60 s re-sync: the
    worker's lease reads the scheduler's estimate, and a tick reads it once for all jobs."""
    from escalation.bootstrap import maintenance_for

    rel = reliability_redis(app)
    calls: list[int] = []

    def clock() -> int:
        calls.append(1)
        return rel.now_ms()

    counter: list[int] = []
    lock = threading.Lock()
    jobs = [_job(f"job-{uuid.uuid4().hex[:8]}", counter, lock) for _ in range(3)]
    m = Maintenance(runs=PostgresMaintenanceRuns(app.engine),
                    lease=LeaderLease(rel, redis_ms=clock), jobs=jobs, actor="w")
    assert len(m.tick(force=True)) == 3
    assert len(calls) == 1 and len(counter) == 3

    worker_maintenance = maintenance_for(app)
    app.scheduler.estimated_now_ms()  # synced: the next 60 s need no TIME
    sent: list[int] = []
    real_time = app.redis.time

    def counted_time() -> Any:
        sent.append(1)
        return real_time()

    app.redis.time = counted_time  # the one client the scheduler and the lease share
    try:
        readings = [worker_maintenance.lease.now_ms() for _ in range(5)]
    finally:
        del app.redis.time
    assert sent == []
    assert readings == sorted(readings) and abs(readings[0] - rel.now_ms()) < 5_000


def test_a_stop_asked_during_reconcile_ends_it_between_pages(app: Any) -> None:
    """A worker's reconcile over a large ledger stops at the next page once a stop signal
    set the flag (instead of holding the stopping worker for minutes); without a stop it
    runs to the end."""
    from datetime import timedelta

    import pytest

    from escalation.bootstrap import maintenance_jobs, reliability_for
    from escalation.entrypoints.worker import MaintenanceStopped, _stop_between_pages
    from tests.e2e.helpers import due_requests, enqueue

    enqueue(app, due_requests(3, app.scheduler.time() + timedelta(hours=1)))
    state = {"stop": False, "in_batch": False, "waiting": False}
    calls: list[bool] = []

    def check() -> None:
        calls.append(state["stop"])
        _stop_between_pages(state)

    (reconcile_job,) = [j for j in maintenance_jobs(app, reliability_for(app), check)
                        if j.name == "reconcile"]
    done = reconcile_job.fn()
    assert done["checked_db"] >= 3 and calls and not any(calls)  # checked, never stopped
    state["stop"] = True
    calls.clear()
    with pytest.raises(MaintenanceStopped):
        reconcile_job.fn()
    assert calls == [True]  # at the first page boundary
