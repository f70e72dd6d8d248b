"""SLA report benchmark: ``escalation report sla`` on an existing ledger database, as the CLI
runs it (a fresh interpreter each), printing wall seconds and the peak RSS of each run with
the machine's load.

Runs, in order: the full recount of the last full month (``--grace-s 61``: any grace but
the default recounts from the ledger), the rollup's first refresh (its backfill: the state
row is removed first, so the refresh folds every dispute), the month from the rollup, all
time from the rollup, and the month's ``--missed --format csv --out FILE``. Build a ledger
with ``escalation bench ledger --keep-database NAME`` first (docs/performance.md).

    python tests/benchmarks/sla_report.py --database-url postgresql://.../NAME
        [--skip-recount] [--skip-backfill]

``--skip-backfill`` keeps the rollup as it is (backfilled earlier, e.g. by ``escalation
report sla-refresh``): each run then refreshes it from its watermark, as a user's does.

The database is changed only in its rollup tables (``sla_rollup``, ``sla_rollup_state``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa


def run(url: str, *args: str) -> tuple[float, float, str]:
    """(wall s, peak RSS MiB of that child, last stdout line) of one CLI run (``os.wait4``:
    the child's own resource usage)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env["ESCALATION_DATABASE_URL"] = url
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "escalation", *args], env=env,
                                stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: exit {proc.returncode}: {errors[-800:]}")
    tail = (text.strip().splitlines() or [""])[-1][:100]
    return wall, usage.ru_maxrss / 1024, tail


def main() -> None:
    """Time the runs and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--skip-recount", action="store_true")
    parser.add_argument("--skip-backfill", action="store_true",
                        help="keep the rollup's state: no backfill, refresh from its watermark")
    args = parser.parse_args()
    engine = sa.create_engine(args.database_url.replace("postgresql://",
                                                        "postgresql+psycopg://", 1))
    with engine.connect() as conn:
        disputes = conn.execute(sa.text("SELECT count(*) FROM escalation_state")).scalar_one()
        rows = conn.execute(sa.text("SELECT count(*) FROM escalation_audit")).scalar_one()
        newest = conn.execute(sa.text("SELECT max(decided_at) FROM escalation_audit")
                              ).scalar_one()
    first = (newest.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0,
                                            microsecond=0) - timedelta(days=1)).replace(day=1)
    end = (first + timedelta(days=32)).replace(day=1)
    month = ["report", "sla", "--from", first.isoformat(), "--to", end.isoformat()]
    ever = ["report", "sla", "--from", "1970-01-01T00:00:00+00:00",
            "--to", (datetime.now(UTC) + timedelta(days=400)).isoformat()]
    print(f"ledger: {disputes:,} disputes, {rows:,} rows; month {first:%Y-%m}; "
          f"load {os.getloadavg()[0]:.2f}")
    out = Path(tempfile.mkdtemp()) / "missed.csv"
    runs: list[tuple[str, list[str]]] = []
    if not args.skip_recount:
        runs.append(("month, full recount (--grace-s 61)", [*month, "--grace-s", "61",
                                                            "--format", "csv"]))
    if not args.skip_backfill:
        with engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM sla_rollup_state"))
        runs.append(("rollup backfill + month", [*month, "--format", "csv"]))
    runs += [("month, rollup", [*month, "--format", "csv"]),
             ("all time, rollup", [*ever, "--format", "csv"]),
             ("month --missed csv --out, rollup", [*month, "--missed", "--format", "csv",
                                                   "--out", str(out)])]
    for name, argv in runs:
        wall, peak, tail = run(args.database_url, *argv)
        print(f"{name:<38} {wall:8.2f} s  peak RSS {peak:7.1f} MiB  load "
              f"{os.getloadavg()[0]:.2f}  | {tail}")
    lines = sum(1 for _ in out.open(encoding="utf-8")) - 1 if out.exists() else 0
    print(f"missed rows written: {lines:,}")


if __name__ == "__main__":
    main()
