"""Console page benchmark: time to first byte of every console page and CSV download
against a real ``escalation serve``, p50 / p95 over N requests each, with the machine's
load (``/proc/loadavg``) printed beside the figures. Not a timed test.

Two steps, each runnable alone:

``build``: a ledger built with the product's own code, no row written any other way. A
CSV in the columns of the CFPB complaint export (``Complaint ID``, ``Date sent to company``,
``Company response to consumer``, ``Timely response?``; ids ``95000000 + i``, sent dates
spread over the last ``--days`` days, a share ``--answered`` of rows with an answer: "In
progress" (the response action), "Closed with explanation" (a resolution), timely Yes or
No) is imported with docs/examples/cfpb_ladder_mapping.toml by ``escalation import`` (the
bulk path and its outcome pass), then ``escalation worker --burst`` fires what is due.
Then ``escalation report sla-refresh`` backfills the SLA rollup (ADR 0033), which the
SLA page and ``GET /v1/reports/sla`` answer from. The database is a scratch one of its own
(``--database``, created when missing).

``measure``: ``escalation serve`` on that database (``--serve-workers`` processes), a
compliance token, one console sign-in; then each page of :data:`PAGES` ``--n`` times in
turn, timed from the request to the first body byte (``httpx`` streaming; a page is then
read whole, a download closed after its first bytes); every request must answer 200 (a
list sorted by lateness, and the overview's period figures, over the two days before
yesterday: sorting by another column than the instant sorts the whole matching list, so it
is bounded). ``/v1/...`` paths are API calls, sent with the token as a bearer token.
The server's log goes to ``--log``. Prints ``page p50 p95 max`` in ms and the
load before and after.

    python tests/benchmarks/console_pages.py build --rows 300000
    python tests/benchmarks/console_pages.py measure --n 20
    (--admin-url postgresql://postgres@127.0.0.1:5432/postgres, --database NAME,
     --redis-url redis://127.0.0.1:6379/9, --namespace NS; on a database `build` did not
     make, e.g. one of `escalation bench ledger`: --dispute UUID)
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import sqlalchemy as sa

from escalation.service_layer.importer import stable_dispute_id

ROOT = Path(__file__).resolve().parents[2]
MAPPING = ROOT / "docs" / "examples" / "cfpb_ladder_mapping.toml"
PAGES: tuple[str, ...] = (
    "/console",
    "/console/deadlines",
    "/console/deadlines?status=missed",
    "/console/deadlines?status=met",
    "/console/deadlines?status=at_risk",
    "/console/deadlines?status=pending",
    "/console/deadlines?status=undetermined",
    "/console/deadlines?open=1",
    "/console/deadlines?sort=late&dir=desc&from={day_before}&to={yesterday}",
    "/console?from={day_before}&to={yesterday}",
    "/console/deadlines.csv?status=missed",
    "/console/pending",
    "/console/pending?window=overdue",
    "/console/pending?sort=elapsed",
    "/console/disputes/{dispute}",
    "/console/ladders",
    "/console/operations",
    "/console/audit",
    "/console/audit?decision=RESOLVED",
    "/console/audit/export.csv?decision=RESOLVED",
    "/console/sla",
    "/console/sla?period=month&from={quarter_ago}&to={yesterday}",
    "/v1/reports/sla?from={month_ago_at}&to={today_at}",
)
ANSWERS = ("In progress", "Closed with explanation")


def load() -> str:
    """The machine's load averages (1, 5, 15 min) and its core count."""
    with open("/proc/loadavg", encoding="ascii") as fh:
        one, five, fifteen = fh.read().split()[:3]
    return f"load {one} {five} {fifteen} on {os.cpu_count()} cores"


def env_for(args: argparse.Namespace) -> dict[str, str]:
    """The environment of the ``escalation`` commands run against the bench database."""
    url = args.admin_url.rsplit("/", 1)[0] + "/" + args.database
    return {**os.environ, "ESCALATION_DATABASE_URL": url, "ESCALATION_REDIS_URL": args.redis_url,
            "ESCALATION_NAMESPACE": args.namespace, "ESCALATION_OPERATOR": "bench"}


def escalation(args: argparse.Namespace, *argv: str) -> str:
    """Run ``python -m escalation ARGV`` against the bench database; its stdout."""
    done = subprocess.run([sys.executable, "-m", "escalation", *argv], env=env_for(args),
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"escalation {' '.join(argv)}: exit {done.returncode}\n"
                         f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return done.stdout


def write_csv(path: Path, rows: int, days: int, answered: float, first: int) -> None:
    """The CFPB-shaped CSV (see the module docstring)."""
    today = datetime.now(UTC).date()
    step = max(1, round(1 / answered)) if answered > 0 else 0
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["Complaint ID", "Date sent to company", "Company response to consumer",
                     "Timely response?"])
        for i in range(rows):
            sent = today - timedelta(days=1 + (i * 7919) % days)
            answer, timely = "Untimely response", ""
            if step and i % step == 0:
                answer = ANSWERS[(i // step) % 2]
                timely = "No" if (i // step) % 5 == 0 else "Yes"
            w.writerow([first + i, sent.isoformat(), answer, timely])


def build(args: argparse.Namespace) -> None:
    """Create the database if missing, migrate it, import the CSV, fire what is due."""
    admin = sa.create_engine(args.admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if not conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :d"),
                            {"d": args.database}).first():
            conn.execute(sa.text(f'CREATE DATABASE "{args.database}"'))
    admin.dispose()
    print(load(), flush=True)
    escalation(args, "db", "upgrade")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "complaints.csv"
        write_csv(path, args.rows, args.days, args.answered, args.first)
        t0 = time.perf_counter()
        out = escalation(args, "import", str(path), "--mapping", str(MAPPING))
        print(f"import {args.rows} rows: {time.perf_counter() - t0:.1f} s", flush=True)
        print(out[-600:], flush=True)
    t0 = time.perf_counter()
    out = escalation(args, "worker", "--burst")
    print(f"worker --burst: {time.perf_counter() - t0:.1f} s\n{out[-600:]}", flush=True)
    t0 = time.perf_counter()
    out = escalation(args, "report", "sla-refresh")
    print(f"report sla-refresh: {time.perf_counter() - t0:.1f} s\n{out[-300:]}", flush=True)
    print(load(), flush=True)


def _first_byte_ms(client: httpx.Client, path: str, token: str) -> float:
    t0 = time.perf_counter()
    headers = {"Authorization": f"Bearer {token}"} if path.startswith("/v1/") else None
    with client.stream("GET", path, headers=headers) as resp:
        if resp.status_code != 200:
            raise SystemExit(f"{path}: HTTP {resp.status_code}: {resp.read()[:400]!r}")
        chunks = resp.iter_raw()
        next(chunks, b"")
        ms = (time.perf_counter() - t0) * 1000
        if "/export." in path or ".csv" in path:
            return ms  # a download: closed after its first bytes (the whole file is long)
        for _chunk in chunks:  # a page: read whole before the next request
            pass
    return ms


def _sign_in(client: httpx.Client, token: str) -> None:
    form = client.get("/console/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    if csrf is None:
        raise SystemExit("sign-in form without a CSRF field")
    resp = client.post("/console/login", data={"token": token, "csrf": csrf.group(1),
                                               "next": "/console"})
    if resp.status_code != 303:
        raise SystemExit(f"sign-in: HTTP {resp.status_code}")


def measure(args: argparse.Namespace) -> None:
    """Serve the bench database and time each page (see the module docstring)."""
    token = escalation(args, "token", "create", "--name", f"bench-{time.time_ns()}",
                       "--role", "compliance").splitlines()[0].strip()
    log = open(args.log, "wb")  # noqa: SIM115 - closed with the server
    serve = subprocess.Popen(
        [sys.executable, "-m", "escalation", "serve", "--port", str(args.port),
         "--workers", str(args.serve_workers)], env=env_for(args),
        stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{args.port}"
    try:
        for _ in range(240):
            try:
                if httpx.get(base + "/livez", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        with httpx.Client(base_url=base, timeout=600, follow_redirects=False) as client:
            _sign_in(client, token)
            before = load()
            today = datetime.now(UTC).date()
            midnight = datetime.combine(today, datetime.min.time(), tzinfo=UTC)
            days = {"yesterday": today - timedelta(days=1),
                    "day_before": today - timedelta(days=2),
                    "quarter_ago": today - timedelta(days=91),
                    "today_at": midnight.isoformat().replace("+", "%2B"),
                    "month_ago_at": (midnight - timedelta(days=30)).isoformat()
                    .replace("+", "%2B"),
                    "dispute": args.dispute
                    or stable_dispute_id(str(args.first + 7), "cfpb")[0]}
            pages = [p.format(**days) for p in PAGES if (args.only is None or args.only in p)
                     and (args.skip is None or args.skip not in p)]
            figures: dict[str, list[float]] = {p: [] for p in pages}
            for _round in range(args.n):
                for page in pages:
                    try:
                        figures[page].append(_first_byte_ms(client, page, token))
                    except httpx.HTTPError as exc:
                        raise SystemExit(f"{page}: {exc!r}") from exc
            print(f"before: {before}\nafter:  {load()}")
            print(f"{'page':60} {'p50':>8} {'p95':>8} {'max':>8}  (ms to first byte, "
                  f"n={args.n})")
            for page, ms in figures.items():
                ms.sort()
                p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
                print(f"{page:60} {ms[len(ms) // 2]:8.1f} {p95:8.1f} {ms[-1]:8.1f}")
    finally:
        serve.terminate()
        serve.wait(30)
        log.close()


def main() -> None:
    """Parse the command line and run ``build`` or ``measure``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("step", choices=("build", "measure"))
    p.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--database", default="escalation_bench_console")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/9")
    p.add_argument("--namespace", default="bench_console")
    p.add_argument("--rows", type=int, default=300_000)
    p.add_argument("--first", type=int, default=95_000_000)
    p.add_argument("--days", type=int, default=120)
    p.add_argument("--answered", type=float, default=0.02)
    p.add_argument("--n", type=int, default=20)
    p.add_argument("--dispute", default=None,
                   help="the dispute page's id (default: a row of the CSV `build` imports)")
    p.add_argument("--only", default=None, help="measure only the pages containing this")
    p.add_argument("--skip", default=None, help="leave out the pages containing this")
    p.add_argument("--port", type=int, default=18431)
    p.add_argument("--serve-workers", type=int, default=2)
    p.add_argument("--log", default=os.path.join(tempfile.gettempdir(), "console_pages.log"))
    args = p.parse_args()
    build(args) if args.step == "build" else measure(args)


if __name__ == "__main__":
    main()
