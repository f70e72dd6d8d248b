"""The files one request runs stay within the bounds of ADR 0039:
``tests/benchmarks/request_walk.py`` (the tables of docs/architecture.md, "Following a
request") run on the real Redis and PostgreSQL with its ``--max-create`` / ``--max-firing``
bounds. A change that spreads one
request over more modules fails here, and the ADR says what the bound is for."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "request_walk.py"
ROOT = SCRIPT.parents[2]
MAX_FIRING = 20
"""One worker pass firing one due escalation (half the 40 files it ran before the redesign)."""
MAX_CREATE = 33
"""One ``POST /v1/escalations`` (ADR 0039: why not half of the 43 files it ran before)."""


@pytest.mark.timeout(300)
def test_one_create_and_one_firing_run_no_more_files_than_their_bounds(
    server_urls: tuple[str, str], redis_url: str, redis_topology: str
) -> None:
    if redis_topology != "server":
        pytest.skip("the walk runs against one Redis server")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--admin-url", server_urls[1], "--redis-url", redis_url,
         "--max-create", str(MAX_CREATE), "--max-firing", str(MAX_FIRING)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    counts = dict(re.findall(r"^One (API create|firing) .*: (\d+) files$", proc.stdout, re.M))
    assert set(counts) == {"API create", "firing"}, proc.stdout[-2000:]
    assert int(counts["firing"]) <= MAX_FIRING
    assert int(counts["API create"]) <= MAX_CREATE
