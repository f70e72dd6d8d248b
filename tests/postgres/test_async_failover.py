"""An asynchronous standby promoted after it missed commits: 0 decisions silently lost
(docs/adr/0014-redis-ahead-of-the-ledger.md).

A real primary and streaming standby (``tests/pg_cluster.py``): the standby stops receiving
WAL, a worker decides every escalation on the primary (Redis applies them and notifies the
review queue), the primary dies, the standby is promoted without those commits. Then: the
same identity (a physical standby is the same database), `doctor` fails REDIS_AHEAD and
warns nothing is synchronous, the maintenance reconcile marks the namespace, the worker
refuses, `reconcile` resets Redis to the promoted ledger naming every lost decision, and a
worker burst decides everything again: every review-stream entry is on the promoted
ledger, as a decision or named by a SCHEDULE_RESET row.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from tests.e2e.test_cli_bad_input import GOOD_HASH
from tests.helpers import run_cli
from tests.pg_cluster import PgCluster
from tests.postgres.helpers import cli_env, new_database, upgrade

pytestmark = pytest.mark.pg_cluster

N = 5


def _recorded(res: subprocess.CompletedProcess[str]) -> int:
    for line in (res.stderr + res.stdout).splitlines():
        if line.startswith("{") and '"worker.stopped"' in line:
            return int(json.loads(line)["recorded"])
    raise AssertionError(f"no worker.stopped line: {res.stderr}")


def _check(res: subprocess.CompletedProcess[str], name: str) -> dict[str, Any]:
    return dict({c["name"]: c for c in json.loads(res.stdout)}[name])


def _rows(url: str, ids: list[str]) -> list[tuple[str, int, str, dict[str, Any]]]:
    engine = sa.create_engine(sa.engine.make_url(url).set(drivername="postgresql+psycopg"))
    try:
        with engine.connect() as conn:
            return [(str(r[0]), int(r[1]), str(r[2]), dict(r[3] or {})) for r in conn.execute(
                sa.text("SELECT dispute_id::text, seq, event, details FROM escalation_audit "
                        "WHERE dispute_id = ANY(CAST(:ids AS uuid[])) "
                        "ORDER BY dispute_id, seq"), {"ids": ids})]
    finally:
        engine.dispose()


def _notified(client: redis.Redis, namespace: str) -> set[tuple[str, int]]:
    """(dispute id, seq) of every review-stream entry of the namespace."""
    out: set[tuple[str, int]] = set()
    for key in client.scan_iter(match=f"escalations:{{{namespace}:*}}:review", count=1000):
        for _id, fields in client.xrange(key, "-", "+"):
            out.add((str(fields["dispute_id"]), int(fields["seq"])))
    return out


def test_async_standby_promoted_with_lag_loses_no_decision_silently(
    pg_cluster_factory: Callable[..., PgCluster], redis_url: str, namespace: str,
    redis_client: redis.Redis,
) -> None:
    pg = pg_cluster_factory(synchronous=False, pgbouncer=False)
    db = new_database(pg, "esc_failover")
    env = cli_env(redis_url, pg.primary_url(db), namespace)
    upgrade(env)
    due = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    ids = [str(uuid.uuid4()) for _ in range(N)]
    for did in ids:
        res = run_cli(env, "enqueue", "--dispute-id", did, "--source-hash", GOOD_HASH,
                      "--due-at", due)
        assert res.returncode == 0, res.stderr
    pg.wait_replica_caught_up()
    res = run_cli(env, "doctor", "--json")
    repl = _check(res, "PG_REPLICATION")
    assert repl["status"] == "WARN" and "async" in repl["detail"], repl
    assert "synchronous_standby_names" in repl["advice"]

    # the standby stops receiving; the primary decides everything, then dies
    pg.stop("replica")
    res = run_cli(env, "worker", "--burst")
    assert res.returncode == 0 and _recorded(res) == N, res.stderr
    assert len(_notified(redis_client, namespace)) == N
    pg.kill("primary")
    pg.start("replica")
    pg.promote()
    promoted = cli_env(redis_url, pg.replica_url(db), namespace)
    assert {e for _, _, e, _ in _rows(pg.replica_url(db), ids)} == {"ENQUEUED"}  # lost

    # same database identity (a physical standby): no refusal; the loss is detected
    res = run_cli(promoted, "doctor", "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    ahead = _check(res, "REDIS_AHEAD")
    assert ahead["status"] == "FAIL" and f"{N} scheduled member(s) ahead" in ahead["detail"]
    res = run_cli(promoted, "maintenance", "run")  # the leader's periodic reconcile
    assert res.returncode == 0, res.stderr
    res = run_cli(promoted, "worker", "--burst")
    assert res.returncode == 1 and "marked for a resync" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr

    res = run_cli(promoted, "reconcile")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["lost_decisions"] == N and report["resync_cleared"] is True, report
    res = run_cli(promoted, "worker", "--burst")
    assert res.returncode == 0 and _recorded(res) == N, res.stderr

    rows = _rows(pg.replica_url(db), ids)
    on_record = {(d, s) for d, s, e, _ in rows if e in ("PROMOTED", "TERMINAL")}
    named = {(d, int(x["lost_decision"]["seq"])) for d, _, e, x in rows
             if e == "SCHEDULE_RESET" and x.get("notified")}
    notified = _notified(redis_client, namespace)
    assert notified <= on_record | named, notified - (on_record | named)  # 0 silently lost
    assert len(named) == N and len(on_record) == N  # each re-decided once, on record
    for did in ids:
        assert [e for d, _, e, _ in rows if d == did] == [
            "ENQUEUED", "SCHEDULE_RESET", "PROMOTED"]
