"""Every path through a real pgbouncer in transaction pooling mode (``tests/pg_cluster.py``):
consecutive transactions of one client land on different server connections, so nothing may
rely on session state (server-side prepared statements, session settings).

Without ``prepare_threshold=None`` psycopg prepares a statement after its 5th use and the
next transaction, on another server connection, fails with ``prepared statement "_pg3_0"
does not exist`` (or ``already exists``); with the ``options=-c TimeZone=UTC`` startup
parameter pgbouncer refuses the connection (``unsupported startup parameter: options``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from escalation.adapters.db import make_engine
from escalation.bench.api import start_api_server
from tests.api.conftest import body, make_tokens, stop_server
from tests.e2e.helpers import due_requests, enqueue, start_worker, worker_output
from tests.pg_cluster import PgCluster
from tests.postgres.helpers import cli_env, new_database, upgrade

pytestmark = pytest.mark.pg_cluster

# a loaded 2-core machine running this step beside other work: the server's start-up (imports,
# schema check, ladder catalog) took over 60 s once
API_START_S = 180

SESSION_STATE_ERRORS = ("prepared statement", "unsupported startup parameter", "Traceback")


def _ledger(engine: sa.Engine, ids: list[uuid.UUID]) -> tuple[int, int]:
    """(disputes promoted exactly once, duplicate (dispute, seq) rows)."""
    with engine.connect() as conn:
        once = conn.execute(sa.text(
            "SELECT count(*) FROM (SELECT dispute_id FROM escalation_audit "
            "WHERE dispute_id = ANY(:ids) AND match_decision = 'PROMOTED_TO_SENIOR' "
            "GROUP BY dispute_id HAVING count(*) = 1) o"), {"ids": ids}).scalar_one()
        dup = conn.execute(sa.text(
            "SELECT count(*) FROM (SELECT dispute_id, seq FROM escalation_audit WHERE "
            "dispute_id = ANY(:ids) GROUP BY 1, 2 HAVING count(*) > 1) d"),
            {"ids": ids}).scalar_one()
    return int(once), int(dup)


@pytest.mark.timeout(300)
def test_three_workers_through_pgbouncer_transaction_mode_drain_exactly_once(
        pg_cluster: PgCluster, redis_url: str) -> None:
    from escalation.bootstrap import build
    from escalation.settings import get_settings

    db = new_database(pg_cluster, "bouncer_drain")
    env = cli_env(redis_url, pg_cluster.pgbouncer_url(db))
    upgrade(env)  # the migrations too, through the pooler
    settings = get_settings(redis_url=redis_url, database_url=pg_cluster.pgbouncer_url(db),
                            namespace=env["ESCALATION_NAMESPACE"], poll_interval_s=1,
                            lock_ttl_s=5, log_format="json")
    app = build(settings, actor="test")
    try:
        ids = enqueue(app, due_requests(900, app.scheduler.time()))
        workers = [start_worker(env, "--burst", "--batch-size", "25") for _ in range(3)]
        codes = [w.wait(timeout=240) for w in workers]
        outputs = [worker_output(w) for w in workers]
        for out in outputs:
            for bad in SESSION_STATE_ERRORS:
                assert bad not in out, out[-3000:]
        assert codes == [0, 0, 0], [o[-2000:] for o in outputs]
        # the work was shared, so each worker ran its statements many times over
        assert sum("worker.batch" in o or "escalation.promoted" in o for o in outputs) >= 2
        assert _ledger(app.engine, ids) == (900, 0)
    finally:
        app.close()


# Runs the commands in one interpreter (typer's CliRunner; each command builds its own
# engine, as a separate process would): one Python start-up instead of one per command.
_RUN_COMMANDS = """
import json, sys
from typer.testing import CliRunner
from escalation.entrypoints.cli import app
for args in json.loads(sys.argv[1]):
    res = CliRunner().invoke(app, args)
    print(json.dumps({"args": args, "code": res.exit_code, "out": res.output,
                      "exc": None if res.exception is None or isinstance(res.exception, SystemExit)
                      else repr(res.exception)}))
"""


@pytest.mark.timeout(300)
def test_every_command_works_through_pgbouncer(pg_cluster: PgCluster, redis_url: str) -> None:
    import subprocess
    import sys

    db = new_database(pg_cluster, "bouncer_cli")
    env = cli_env(redis_url, pg_cluster.pgbouncer_url(db))
    upgrade(env)
    did = str(uuid.uuid4())
    due = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    commands = [
        ["enqueue", "--dispute-id", did, "--tier", "standard", "--materiality", "10.00",
         "--source-hash", "abc", "--due-at", due],
        ["status"], ["audit", "show", did], ["pause", did, "--reason", "waiting"],
        ["resume", did], ["reconcile"], ["audit", "verify"],
        ["resolve", did, "--outcome", "error_corrected", "--reason", "refunded"],
        ["audit", "show", did, "--json"],
    ]
    done = subprocess.run([sys.executable, "-c", _RUN_COMMANDS, json.dumps(commands)],
                          env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["args"] for r in results] == commands, done.stdout[-3000:]
    for r in results:
        assert r["code"] == 0 and r["exc"] is None, r
        for bad in SESSION_STATE_ERRORS:
            assert bad not in r["out"], r
    shown = results[-1]["out"]
    events = [json.loads(line)["event"] for line in shown.splitlines() if line.startswith("{")]
    assert events[0] == "ENQUEUED" and events[-1] == "RESOLVED", shown


@pytest.mark.timeout(300)
def test_api_through_pgbouncer_answers_concurrent_creates_without_500(
        pg_cluster: PgCluster, redis_url: str) -> None:
    db = new_database(pg_cluster, "bouncer_api")
    env = cli_env(redis_url, pg_cluster.pgbouncer_url(db))
    upgrade(env)
    engine = make_engine(pg_cluster.pgbouncer_url(db))
    try:
        tokens, _ = make_tokens(engine, "bouncer")
        env.update(ESCALATION_LOG_LEVEL="WARNING", ESCALATION_API_TOKEN_CACHE_S="0",
                   ESCALATION_API_AUTH_FAIL_LIMIT="1000000")
        url, proc = start_api_server(env, 1, timeout_s=API_START_S)
        try:
            answers = asyncio.run(_creates(url, tokens["service"], total=200, clients=12))
        finally:
            stop_server(proc)
        codes = sorted({r[0] for r in answers})
        assert codes == [201], [r for r in answers if r[0] != 201][:5]
        with engine.connect() as conn:
            written = conn.execute(sa.text(
                "SELECT count(*) FROM escalation_state")).scalar_one()
        assert written == 200
    finally:
        engine.dispose()


async def _creates(url: str, token: str, total: int, clients: int) -> list[tuple[int, Any]]:
    """``total`` single creates of distinct disputes from ``clients`` concurrent clients."""
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for _ in range(total):
        queue.put_nowait(body())
    answers: list[tuple[int, Any]] = []

    async def client() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60,
                                     headers={"Authorization": f"Bearer {token}"}) as c:
            while not queue.empty():
                b = queue.get_nowait()
                r = await c.post("/v1/escalations", json=b)
                answers.append((r.status_code, r.text[:300]))

    await asyncio.gather(*(client() for _ in range(clients)))
    return answers


@pytest.mark.timeout(300)
def test_import_and_a_ladder_release_plan_apply_work_through_pgbouncer(
        pg_cluster: PgCluster, redis_url: str, tmp_path: Path) -> None:
    """The CSV import (its bulk COPY path) and a ladder change (release, plan, apply: the
    migration's batched writes and its ledger event) through transaction pooling."""
    from tests.helpers import run_cli

    root = Path(__file__).resolve().parents[2]
    ladders = tmp_path / "ladders"
    ladders.mkdir()
    for f in (root / "ladders").glob("*.toml"):
        (ladders / f.name).write_text(f.read_text())
    db = new_database(pg_cluster, "bouncer_ladder")
    env = dict(cli_env(redis_url, pg_cluster.pgbouncer_url(db)),
               ESCALATION_LADDERS_DIR=str(ladders))
    upgrade(env)

    csv_file = tmp_path / "complaints.csv"
    csv_file.write_text("Complaint ID,Date sent to company,Company response to consumer,"
                        "Timely response?\n9200001,2026-11-20,In progress,Yes\n"
                        "9200002,2026-11-23,,\n")
    done = run_cli(env, "import", str(csv_file), "--mapping",
                   str(root / "docs/examples/cfpb_ladder_mapping.toml"))
    assert done.returncode == 0, done.stdout + done.stderr
    for bad in SESSION_STATE_ERRORS:
        assert bad not in done.stdout + done.stderr

    due = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    for _ in range(3):
        done = run_cli(env, "enqueue", "--dispute-id", str(uuid.uuid4()), "--tier", "standard",
                       "--materiality", "10.00", "--source-hash", "abc", "--due-at", due)
        assert done.returncode == 0, done.stderr
    v1 = (ladders / "dispute_review.v1.toml").read_text()
    (ladders / "dispute_review.v2.toml").write_text(
        v1.replace("version = 1\n", "version = 2\nprevious_version = 1\n", 1).replace(
            "amount = 48,", "amount = 36,", 1))
    done = run_cli(env, "ladder", "release", "--ladder", "dispute_review", "--version", "2",
                   "--reason", "CHG-7")
    assert done.returncode == 0, done.stdout + done.stderr
    plan = run_cli(env, "ladder", "plan", "--ladder", "dispute_review", "--to", "2", "--json")
    assert plan.returncode == 0, plan.stderr
    plan_hash = json.loads(plan.stdout)["plan_hash"]
    done = run_cli(env, "ladder", "apply", "--ladder", "dispute_review", "--to", "2",
                   "--plan-hash", plan_hash, "--reason", "CHG-7")
    assert done.returncode == 0, done.stdout + done.stderr
    for bad in SESSION_STATE_ERRORS:
        assert bad not in done.stdout + done.stderr
    engine = make_engine(pg_cluster.pgbouncer_url(db))
    try:
        with engine.connect() as conn:
            migrated = conn.execute(sa.text(
                "SELECT count(*) FROM escalation_audit WHERE event = 'LADDER_MIGRATED'")
            ).scalar_one()
            imported = conn.execute(sa.text(
                "SELECT count(*) FROM escalation_state WHERE ladder = 'cfpb_complaint_response'")
            ).scalar_one()
        assert migrated == 3 and imported == 2
    finally:
        engine.dispose()
