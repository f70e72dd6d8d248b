"""A benchmark never writes into a database it did not create, drops what it created, and
stops the embedded servers it started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import scratch_database

pytestmark = pytest.mark.bench


def _bench(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "escalation", "bench", *args, "--json-only"],
                          env=env, capture_output=True, text=True, timeout=600, check=False)


def _count(url: str, sql: str) -> int:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(sql)).scalar_one())
    finally:
        engine.dispose()


BENCH_DBS = "SELECT count(*) FROM pg_database WHERE datname LIKE 'escbench\\_%'"


def test_drain_with_database_url_leaves_that_database_untouched(
    cli_env: dict[str, str], server_urls: tuple[str, str]
) -> None:
    from escalation.adapters.db import upgrade_to_head

    with scratch_database(server_urls[1], "escalation_benchiso") as url:
        upgrade_to_head(url)
        before_dbs = _count(url, BENCH_DBS)
        res = _bench(cli_env, "drain", "--n", "50", "--workers", "1", "--batch-size", "50",
                     "--lead-s", "3", "--database-url", url)
        assert res.returncode == 0, res.stdout + res.stderr
        assert _count(url, "SELECT count(*) FROM escalation_state") == 0
        assert _count(url, "SELECT count(*) FROM escalation_audit") == 0
        # its own database was dropped again (other runs may create theirs concurrently, so
        # compare with a bound, not equality)
        assert _count(url, BENCH_DBS) <= before_dbs


@pytest.mark.slow
def test_drain_on_embedded_servers_stops_what_it_started(tmp_path: Path) -> None:
    from escalation.adapters.embedded import services_status, stop_services

    home = tmp_path / "h"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env["ESCALATION_HOME"] = str(home)
    try:
        res = _bench(env, "drain", "--n", "20", "--workers", "1", "--batch-size", "20",
                     "--lead-s", "3")
        assert res.returncode == 0, res.stdout + res.stderr
        status = services_status(home)
        assert not status["valkey"]["running"] and not status["postgres"]["running"], status
    finally:
        stop_services(home)


def test_a_failed_worker_log_is_kept_in_a_private_file(tmp_path: Path) -> None:
    from escalation.bench.common import WorkerProc

    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_HOME=str(tmp_path), ESCALATION_BATCH_SIZE="9999")  # refused at start
    worker = WorkerProc.start(env, "keep-log-test")
    try:
        assert worker.proc.wait(60) == 2
        path = worker.keep_log("worker exited during the run")
    finally:
        worker.close()
    try:
        text = path.read_text()
        assert text.startswith("# worker exited during the run")
        assert "batch_size" in text  # the worker's own error line survived
        assert path.stat().st_mode & 0o777 == 0o600
        assert path.parent.stat().st_mode & 0o077 == 0
    finally:
        path.unlink()
