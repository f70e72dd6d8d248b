"""Smoke runs of ``tests/benchmarks/import_200k.py`` (the import speed and memory benchmark) at
a tiny size, in both of its modes: the figures it prints must be there and well formed, and
it must leave no database and no Redis key behind. Timings are never asserted here (the
figures are read on a quiet machine, docs/performance.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

pytestmark = pytest.mark.bench

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "import_200k.py"
ROOT = SCRIPT.parents[2]


def _databases(admin_url: str) -> set[str]:
    engine = sa.create_engine(admin_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            return set(conn.execute(sa.text(
                "SELECT datname FROM pg_database WHERE datname LIKE 'escalation_bench_%'"
            )).scalars())
    finally:
        engine.dispose()


def _run(server_urls: tuple[str, str], redis_url: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ESCALATION_")}  # synthetic rows, no configured deployment
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--rows", "2500", "--admin-url", server_urls[1],
         "--redis-url", redis_url, *args],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize("args", [("--warnings",), ("--cli",)], ids=["in-process", "cli"])
def test_import_benchmark_prints_its_figures_and_cleans_up(
    server_urls: tuple[str, str], redis_url: str, redis_topology: str, args: tuple[str, ...]
) -> None:
    if redis_topology != "server":
        pytest.skip("the benchmark runs against one Redis server")
    client = redis.Redis.from_url(redis_url)
    keys_before = set(client.scan_iter(match="*{bench*", count=1000))
    dbs_before = _databases(server_urls[1])

    out = _run(server_urls, redis_url, *args)

    summary = next(ln for ln in out.splitlines() if ln.startswith("SUMMARY import"))
    rate = re.search(r"2,500 rows ([\d,]+) rows/s", summary)
    assert rate and int(rate.group(1).replace(",", "")) > 0, summary
    if "--cli" in args:
        assert "ladder baseline release) took" in out
        mem = re.search(r"peak PSS of the command's processes (\d+) MiB = ([\d.]+) MB, "
                        r"peak RSS (\d+) MiB = ([\d.]+) MB", summary)
        assert mem, summary
        pss_mib, pss_mb, rss_mib, rss_mb = (float(g) for g in mem.groups())
        # a running CPython with the service's libraries holds tens of MiB: a real reading
        assert 30 < pss_mib < 1000 and 30 < rss_mib < 1000
        assert abs(pss_mb - pss_mib * 2**20 / 1e6) < 1.5
        assert abs(rss_mb - rss_mib * 2**20 / 1e6) < 1.5
    else:
        assert "warnings scheduled: 5,000" in out  # two pre-breach warnings per escalation
        assert re.search(r"peak PSS \(with the pass 1 child\) \d+ MiB", summary)
        assert re.search(r"pass 1 \(parse, validate, build\) [\d.]+ s, pass 2", out)

    assert set(client.scan_iter(match="*{bench*", count=1000)) <= keys_before
    client.close()
    assert _databases(server_urls[1]) <= dbs_before
