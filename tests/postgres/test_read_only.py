"""A read-only database (a hot standby, a primary in a failover's read-only window) and a
real promotion: workers back off with one line per state change and no traceback, claim
nothing while the database refuses writes and resume when a writable primary answers;
``enqueue`` exits 4 with one line; the API answers 503 with ``Retry-After``. Multi-host
URLs in both libpq forms find the writable node (``target_session_attrs=read-write``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from escalation.adapters.db import make_engine
from escalation.bench.api import start_api_server
from tests.api.conftest import body, make_tokens, stop_server
from tests.e2e.helpers import due_requests, enqueue, start_worker, worker_output
from tests.helpers import run_cli
from tests.pg_cluster import PgCluster
from tests.postgres.helpers import cli_env, new_database, upgrade

pytestmark = pytest.mark.pg_cluster

# a loaded 2-core machine running this step beside other work: the server's start-up (imports,
# schema check, ladder catalog) took over 60 s once
API_START_S = 180


def _app(redis_url: str, database_url: str, namespace: str) -> Any:
    from escalation.bootstrap import build
    from escalation.settings import get_settings

    return build(get_settings(redis_url=redis_url, database_url=database_url,
                              namespace=namespace, poll_interval_s=1, lock_ttl_s=5,
                              log_format="json"), actor="test")


def _promoted(engine: sa.Engine, ids: list[uuid.UUID]) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(
            "SELECT count(DISTINCT dispute_id) FROM escalation_audit WHERE dispute_id = ANY(:i)"
            " AND match_decision = 'PROMOTED_TO_SENIOR'"), {"i": ids}).scalar_one())


def _wait_for(check: Callable[[], bool], timeout_s: float, what: str, out: Callable[[], str]
              ) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{out()[-4000:]}"
        time.sleep(0.2)


def _stop(proc: Any) -> int:
    proc.terminate()
    try:
        return int(proc.wait(30))
    except Exception:
        proc.kill()
        return int(proc.wait(10))


@pytest.mark.timeout(240)
def test_enqueue_and_api_against_a_hot_standby_refuse_clearly(
        pg_cluster: PgCluster, redis_url: str) -> None:
    db = new_database(pg_cluster, "standby_cli")
    env = cli_env(redis_url, pg_cluster.primary_url(db))
    upgrade(env)
    engine = make_engine(pg_cluster.primary_url(db))
    try:
        tokens, _ = make_tokens(engine, "standby")
    finally:
        engine.dispose()
    # first use on the primary: the ladder baseline is released (a write) before the standby
    app = _app(redis_url, pg_cluster.primary_url(db), env["ESCALATION_NAMESPACE"])
    try:
        ids = enqueue(app, due_requests(30, app.scheduler.time()))
    finally:
        app.close()
    pg_cluster.wait_replica_caught_up()
    standby = dict(env, ESCALATION_DATABASE_URL=pg_cluster.replica_url(db))
    due = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    done = run_cli(standby, "enqueue", "--dispute-id", str(uuid.uuid4()), "--tier", "standard",
                   "--materiality", "10.00", "--source-hash", "abc", "--due-at", due)
    assert done.returncode == 4, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "read-only" in errors[0], done.stderr
    assert "Traceback" not in done.stderr

    # a worker on the standby: one line when the refusals begin, no traceback; a --burst
    # run gives up after its attempts with one error line and exit 4, nothing recorded
    worker = start_worker(standby, "--burst", "--poll-interval-s", "1")
    code = worker.wait(120)
    out = worker_output(worker)
    assert code == 4, out[-3000:]
    assert out.count("worker.database_read_only") == 1 and "Traceback" not in out, out[-3000:]
    assert len([ln for ln in out.splitlines() if ln.startswith("error:")]) == 1, out[-3000:]
    primary = make_engine(pg_cluster.primary_url(db))
    try:
        assert _promoted(primary, ids) == 0
    finally:
        primary.dispose()

    standby.update(ESCALATION_LOG_LEVEL="WARNING", ESCALATION_API_TOKEN_CACHE_S="0",
                   ESCALATION_API_AUTH_FAIL_LIMIT="1000000")
    url, proc = start_api_server(standby, 1, timeout_s=API_START_S)
    try:
        r = httpx.post(f"{url}/v1/escalations", json=body(), timeout=30,
                       headers={"Authorization": f"Bearer {tokens['service']}"})
    finally:
        stop_server(proc)
    assert r.status_code == 503, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert int(r.headers["Retry-After"]) > 0
    assert "read-only" in r.json()["detail"]
    assert str(pg_cluster.port("replica")) not in r.text and "127.0.0.1" not in r.text


@pytest.mark.timeout(300)
def test_worker_backs_off_while_read_only_and_resumes_when_writable(
        pg_cluster_factory: Callable[..., PgCluster], redis_url: str) -> None:
    pg = pg_cluster_factory(replica=False, pgbouncer=False)
    db = new_database(pg, "read_only_window")
    env = cli_env(redis_url, pg.primary_url(db))
    upgrade(env)
    app = _app(redis_url, pg.primary_url(db), env["ESCALATION_NAMESPACE"])
    try:
        # a failover's read-only window: the primary refuses writes
        pg.sql("primary", "ALTER SYSTEM SET default_transaction_read_only = on")
        pg.sql("primary", "SELECT pg_reload_conf()")
        ids = enqueue_while_writable(pg, app, 200)
        worker = start_worker(env, "--batch-size", "50", "--lock-ttl-s", "30",
                              "--poll-interval-s", "1")
        try:
            out = lambda: worker_output(worker)  # noqa: E731
            _wait_for(lambda: "worker.database_read_only" in out(), 90, "read-only back-off", out)
            time.sleep(4)  # several probes while read-only
            assert worker.poll() is None, out()
            assert out().count("worker.database_read_only") == 1, out()
            assert "Traceback" not in out() and "worker.backoff" not in out(), out()
            assert _promoted(app.engine, ids) == 0
            # the batch it claimed when the ledger refused it was handed back at once (due
            # again, not leased for 30 s), and nothing more is claimed while read-only
            leased = app.redis.zcount(app.scheduler.shard_keys()[0].pending,
                                      f"({int(time.time() * 1000) + 10_000}", "+inf")
            assert leased == 0
            pg.sql("primary", "ALTER SYSTEM SET default_transaction_read_only = off")
            pg.sql("primary", "SELECT pg_reload_conf()")
            writable_at = time.monotonic()
            _wait_for(lambda: "worker.database_writable" in out(), 30, "resume", out)
            resumed_s = time.monotonic() - writable_at
            # every escalation goes at once: none waits the 30 s lease
            _wait_for(lambda: _promoted(app.engine, ids) == len(ids), 20, "drain", out)
            assert resumed_s < 5, resumed_s
            assert out().count("worker.database_writable") == 1, out()
        finally:
            code = _stop(worker)
        assert code == 0, worker_output(worker)[-3000:]
        assert "Traceback" not in worker_output(worker)
    finally:
        app.close()


def enqueue_while_writable(pg: PgCluster, app: Any, n: int) -> list[uuid.UUID]:
    """Enqueue ``n`` due escalations as a session that may write (``SET SESSION
    CHARACTERISTICS`` is per session: the app's own sessions stay read-only)."""
    pg.sql("primary", "ALTER SYSTEM SET default_transaction_read_only = off")
    pg.sql("primary", "SELECT pg_reload_conf()")
    time.sleep(0.3)
    app.engine.dispose()
    ids = enqueue(app, due_requests(n, app.scheduler.time()))
    pg.sql("primary", "ALTER SYSTEM SET default_transaction_read_only = on")
    pg.sql("primary", "SELECT pg_reload_conf()")
    time.sleep(0.3)
    return ids


@pytest.mark.timeout(300)
def test_worker_on_a_multi_host_url_resumes_on_the_promoted_replica(
        pg_cluster_factory: Callable[..., PgCluster], redis_url: str) -> None:
    # a synchronous standby: the promotion loses no commit (the asynchronous case, and what
    # it loses, is the ledger-ahead detection's)
    pg = pg_cluster_factory(synchronous=True, pgbouncer=False)
    db = new_database(pg, "promotion")
    both = pg.multihost_url(db, form="netloc")  # h1:p1,h2:p2/db?target_session_attrs=...
    env = cli_env(redis_url, both)
    upgrade(env)
    app = _app(redis_url, pg.multihost_url(db, form="query"), env["ESCALATION_NAMESPACE"])
    try:
        ids = enqueue(app, due_requests(400, app.scheduler.time()))
        worker = start_worker(env, "--batch-size", "20", "--lock-ttl-s", "5",
                              "--poll-interval-s", "1")
        out = lambda: worker_output(worker)  # noqa: E731
        replica = make_engine(pg.replica_url(db))
        try:
            _wait_for(lambda: _promoted(replica, ids) >= 40, 120, "a first part drained", out)
            pg.kill("primary")
            pg.promote()
            promoted_at = time.monotonic()
            _wait_for(lambda: _promoted(replica, ids) == len(ids), 120, "drain on the new "
                      "primary", out)
            took = time.monotonic() - promoted_at
            assert worker.poll() is None, out()
            assert "Traceback" not in out(), out()
        finally:
            code = _stop(worker)
            with replica.connect() as conn:
                dup = conn.execute(sa.text(
                    "SELECT count(*) FROM (SELECT dispute_id, seq FROM escalation_audit "
                    "WHERE dispute_id = ANY(:i) GROUP BY 1, 2 HAVING count(*) > 1) d"),
                    {"i": ids}).scalar_one()
            replica.dispose()
        assert dup == 0
        assert code == 0, worker_output(worker)[-3000:]
        print(f"drained on the promoted replica {took:.1f} s after the promotion")
    finally:
        app.close()
