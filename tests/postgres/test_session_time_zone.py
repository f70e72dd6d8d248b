"""The server's default ``TimeZone`` never changes what the product reads or prints: the
session zone is not set (transaction pooling would hand it to another client), every
``timestamptz`` is read in UTC by the client (``adapters/db.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from escalation.adapters.db import make_engine
from tests.pg_cluster import PgCluster
from tests.postgres.helpers import cli_env, new_database, upgrade

pytestmark = pytest.mark.pg_cluster

_RUN = """
import json, sys
from typer.testing import CliRunner
from escalation.entrypoints.cli import app
for args in json.loads(sys.argv[1]):
    res = CliRunner().invoke(app, args)
    print(json.dumps({"code": res.exit_code, "out": res.output, "exc": repr(res.exception)}))
"""
# values the database or Redis clock, or a random trace, make different in every run
_PER_RUN = {"recorded_at", "trace_id", "row_hash", "prev_hash", "decided_at", "created_at",
            "seq_hash", "actor", "chain_created_at"}


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in _PER_RUN}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _scenario(pg: PgCluster, redis_url: str, via: str, did: str,
              opened: datetime) -> list[Any]:
    db = new_database(pg, "tz")
    url = pg.pgbouncer_url(db) if via == "pgbouncer" else pg.primary_url(db)
    env = cli_env(redis_url, url)
    upgrade(env)
    commands = [
        ["enqueue", "--dispute-id", did, "--ladder", "reg_e_error_resolution",
         "--tier", "standard", "--opened-at", opened.isoformat(),
         "--notice-at", (opened - timedelta(hours=10)).isoformat(),
         "--attribute", "new_account=false", "--attribute", "point_of_sale=false",
         "--attribute", "foreign_initiated=false",
         "--materiality", "1250.00", "--source-hash", "9b1d"],
        ["action", "record", did, "--action", "provisional_credit",
         "--at", (opened + timedelta(minutes=5)).isoformat(), "--amount", "1250.00",
         "--currency", "USD",
         "--idempotency-key", f"pc-{did}"],
        ["audit", "show", did, "--json"],
    ]
    done = subprocess.run([sys.executable, "-c", _RUN, json.dumps(commands)], env=env,
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["code"] for r in results] == [0, 0, 0], results
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            zone = conn.execute(sa.text("SHOW TimeZone")).scalar_one()
            row = conn.execute(sa.text(
                "SELECT due_at, entered_tier_at FROM escalation_state WHERE dispute_id = :d"),
                {"d": did}).one()
    finally:
        engine.dispose()
    assert all(v.utcoffset().total_seconds() == 0 for v in row), row
    trail = [json.loads(line) for line in results[2]["out"].splitlines() if line.startswith("{")]
    return [zone, [v.isoformat() for v in row], _strip(trail)]


@pytest.mark.timeout(300)
def test_a_server_in_new_york_time_gives_the_same_results_as_one_in_utc(
        pg_cluster_factory: Callable[..., PgCluster], redis_url: str) -> None:
    utc = pg_cluster_factory(replica=False, server_settings={"timezone": "UTC"})
    new_york = pg_cluster_factory(replica=False,
                                  server_settings={"timezone": "America/New_York"})
    did = str(uuid.uuid4())
    # opened an hour ago (the tier's SLA window still open: its due time follows from the
    # inputs alone), the notice ten hours earlier: on another calendar day in New York
    opened = datetime.now(UTC).replace(minute=30, second=0, microsecond=0) - timedelta(hours=1)
    reference = _scenario(utc, redis_url, "primary", did, opened)
    # (times near midnight UTC: the previous day in New York)
    got = _scenario(new_york, redis_url, "pgbouncer", did, opened)
    assert got[0] == "America/New_York"  # the session zone really is New York's
    assert got[1:] == reference[1:], json.dumps([got, reference], indent=1, default=str)
