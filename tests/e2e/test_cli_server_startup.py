"""Reaching the servers: a command on the embedded servers migrates their database first, and a
burst worker whose Redis stays unreachable gives up with one line instead of a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import run_cli


@pytest.mark.slow
def test_embedded_database_is_migrated_by_any_command(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env["ESCALATION_HOME"] = str(tmp_path / "home")
    try:
        res = run_cli(env, "status", "--json")
        assert res.returncode == 0, res.stderr
        assert '"pending": 0' in res.stdout
    finally:
        run_cli(env, "services", "stop")


@pytest.mark.slow
def test_burst_worker_gives_up_when_redis_stays_unreachable(cli_env: dict[str, str]) -> None:
    res = run_cli(dict(cli_env, ESCALATION_REDIS_URL="redis://127.0.0.1:1/9"),
                  "worker", "--burst")
    assert res.returncode == 1, res.stderr[-500:]
    assert "cannot reach Redis" in res.stderr and "Traceback" not in res.stderr
