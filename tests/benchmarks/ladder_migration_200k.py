"""Ladder migration benchmark: ``plan`` and ``apply`` on 200,000 pending escalations,
printing escalations/s, batches and peak RSS. Not a timed test. Target: apply >= 5,000
escalations/s (docs/performance.md).

Method:

* a scratch PostgreSQL database is created (``escalation_bench_<hex>``), migrated to the
  Alembic head, and dropped at the end (``WITH (FORCE)``);
* Redis DB 9 with a fresh namespace ``bench<hex>``; every key of that namespace is deleted
  at the end with SCAN + UNLINK (never FLUSHDB);
* a private ladder directory holds ``benchladder.v1.toml`` (standard, senior, compliance; released
  as baseline on first use) and, after the enqueue, ``benchladder.v2.toml`` (a ``team_lead``
  tier inserted, then released with ``release_version``), copied from
  tests/fixtures/ladders/{base,inserted};
* N escalations (tier ``standard``, due in 6 h, so no worker would fire them) are enqueued
  on v1 through the batched service layer (``enqueue_many``, chunks of 5,000);
* ``plan_migration`` is timed, then ``apply_migration`` with the plan's hash (default batch
  500: each page is read and planned at apply time, then one PostgreSQL transaction + one
  seq-guarded Redis restore per batch). No workers run: this measures the migration's own
  throughput; the apply under 3 firing workers is tests/e2e/test_ladder_live_apply.py.

    python tests/benchmarks/ladder_migration_200k.py [--n 200000] [--batch-size 500]
        [--admin-url postgresql://postgres@127.0.0.1:5432/postgres]
        [--redis-url redis://127.0.0.1:6379/9]

Peak RSS comes from ``resource.getrusage`` (Linux: KiB); it is the process peak so far, so
it is printed after each phase.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import tempfile
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import redis
import sqlalchemy as sa

from escalation.adapters import db
from escalation.adapters.ladder_files import LadderCatalog
from escalation.adapters.ladder_history import LadderHistoryStore
from escalation.adapters.pipeline import Overlapped
from escalation.bootstrap import App, build
from escalation.ports import LadderSource
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueMany, EnqueueRequest, enqueue_many
from escalation.service_layer.ladder_migration import (
    ApplyHooks,
    ApplyMigration,
    LadderPorts,
    PlanMigration,
    apply_migration,
    plan_migration,
)
from escalation.service_layer.ladder_release import ReleaseVersion, release_version
from escalation.settings import get_settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ladders"
LADDER = "benchladder"
CHUNK = 5_000


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, MiB (Linux ru_maxrss is KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def copy_ladder(variant: str, version: int, into: Path) -> None:
    """Copy the migdemo fixture ``<variant>/migdemo.v<version>.toml`` as ``benchladder``."""
    text = (FIXTURES / variant / f"migdemo.v{version}.toml").read_text()
    (into / f"{LADDER}.v{version}.toml").write_text(
        text.replace('ladder = "migdemo"', f'ladder = "{LADDER}"'))


def enqueue(app: App, catalog: LadderSource, n: int) -> float:
    """Enqueue ``n`` escalations on the latest version; returns the seconds it took."""
    due = app.scheduler.time() + timedelta(hours=6)
    t0 = time.perf_counter()
    for lo in range(0, n, CHUNK):
        reqs = []
        for _ in range(min(CHUNK, n - lo)):
            did = uuid.uuid4()
            reqs.append(EnqueueRequest(
                dispute_id=did, materiality=Decimal("125.00"),
                source_hash=hashlib.sha256(did.bytes).hexdigest(), tier="standard",
                due_at=due, ladder=LADDER))
        enqueue_many(
            EnqueueMany(requests=reqs, actor="bench", default_ladder=LADDER),
            CorePorts(scheduler=app.scheduler, store=app.store, ladders=catalog,
                      calendars=app.calendars),
        )
    return time.perf_counter() - t0


def backend_cpu_s(engine: sa.Engine) -> dict[int, float]:
    """CPU seconds (user + system) of every PostgreSQL backend on ``engine``'s database, by
    pid, read from /proc (same host only; empty when unreadable)."""
    with engine.connect() as conn:
        pids = conn.execute(sa.text(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()")).scalars()
        out: dict[int, float] = {}
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[int(pid)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def redis_cpu_s(app: App) -> float:
    """CPU seconds (user + system) of the whole redis-server (other clients included)."""
    info = app.redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def unlink_namespace(redis_url: str, namespace: str) -> int:
    """UNLINK every key of ``namespace`` (hash-tagged ``{ns:<shard>}``); returns the count."""
    client = redis.Redis.from_url(redis_url)
    deleted = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"*{{{namespace}:*", count=5000):
        batch.append(key)
        if len(batch) >= 5000:
            deleted += int(client.unlink(*batch))
            batch = []
    if batch:
        deleted += int(client.unlink(*batch))
    client.close()
    return deleted


def run(app: App, ladders_dir: Path, n: int, batch_size: int) -> None:
    """Enqueue, plan, apply; print the figures."""
    history = LadderHistoryStore(app.engine)
    took = enqueue(app, app.ladders, n)
    print(f"enqueued {n} on {LADDER}@1 in {took:.1f} s ({n / took:,.0f}/s); "
          f"peak RSS {peak_rss_mib():.0f} MiB")
    copy_ladder("inserted", 2, ladders_dir)
    release_version(ReleaseVersion(LADDER, 2, "bench", "benchmark", app.scheduler.time()),
                    history=history, files=LadderCatalog.from_dir(ladders_dir, strict=False))
    catalog = app.ladders

    t0 = time.perf_counter()
    ports = LadderPorts(history, app.scheduler, catalog, app.calendars,
                        Overlapped("ladder-apply", read_ahead=True))  # as ladder_ports_for
    plan = plan_migration(PlanMigration(LADDER, 2), ports)
    took = time.perf_counter() - t0
    print(f"plan:  {len(plan.items)} escalations in {took:.1f} s "
          f"({len(plan.items) / took:,.0f}/s), blocked {len(plan.blocked)}, "
          f"hash {plan.plan_hash[:16]}...; peak RSS {peak_rss_mib():.0f} MiB")

    batches = {"n": 0}
    marks: list[float] = []  # wall time at each quarter of the apply

    def progress(phase: str, done: int, total: int | None) -> None:
        batches["n"] += 1
        total = total or done
        while len(marks) < 4 and done >= total * (len(marks) + 1) / 4:
            marks.append(time.perf_counter())

    pg0, redis0 = backend_cpu_s(app.engine), redis_cpu_s(app)
    t0, cpu0 = time.perf_counter(), time.process_time()
    report = apply_migration(
        ApplyMigration(LADDER, 2, plan.plan_hash, actor="bench", batch_size=batch_size),
        ports, ApplyHooks(progress=progress))
    took, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    print(f"apply: {report.migrated} escalations in {took:.1f} s "
          f"({report.migrated / took:,.0f}/s, planning at apply time included), "
          f"{batches['n']} batches of {batch_size}; {report.summary()}; "
          f"peak RSS {peak_rss_mib():.0f} MiB")
    quarters = [b - a for a, b in zip([t0, *marks[:-1]], marks, strict=False)]
    print("apply per quarter: " + ", ".join(f"{n / 4 / q:,.0f}/s" for q in quarters if q > 0))
    print(f"apply CPU of this process: {cpu:.1f} s ({report.migrated / cpu:,.0f} "
          f"escalations per CPU-second; PostgreSQL and Redis CPU not included)")
    pg1, redis1 = backend_cpu_s(app.engine), redis_cpu_s(app)
    pg_cpu = sum(v - pg0.get(pid, 0.0) for pid, v in pg1.items())
    print(f"apply CPU of the PostgreSQL backends: {pg_cpu:.1f} s; of redis-server (shared "
          f"with other clients): {redis1 - redis0:.1f} s; all three: "
          f"{(cpu + pg_cpu + redis1 - redis0) * 1e6 / max(report.migrated, 1):,.0f} us per "
          f"escalation")
    with app.engine.connect() as conn:
        on_v2 = conn.execute(sa.text(
            "SELECT count(*) FROM escalation_state WHERE ladder = :l AND ladder_version = 2"),
            {"l": LADDER}).scalar_one()
    if on_v2 != n:
        raise SystemExit(f"check failed: {on_v2} of {n} escalations on {LADDER}@2")
    print(f"check: {on_v2} escalations on {LADDER}@2 in PostgreSQL; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


def main() -> None:
    """Create the scratch database and namespace, run, clean up; print the figures."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--admin-url", default=os.environ.get(
        "ESCALATION_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))
    ap.add_argument("--redis-url", default=os.environ.get(
        "ESCALATION_REDIS_URL", "redis://127.0.0.1:6379/9"))
    args = ap.parse_args()
    if args.redis_url.rstrip("/").endswith("/0") or "/" not in args.redis_url[8:]:
        raise SystemExit("refusing Redis DB 0: pass a URL with a DB index, e.g. .../9")
    admin_url = db.normalize_url(args.admin_url)
    name = f"escalation_bench_{uuid.uuid4().hex[:10]}"
    namespace = f"bench{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        db.upgrade_to_head(url)
        with tempfile.TemporaryDirectory() as tmp:
            ladders_dir = Path(tmp)
            copy_ladder("base", 1, ladders_dir)
            settings = get_settings(redis_url=args.redis_url, database_url=url,
                                    namespace=namespace, ladders_dir=ladders_dir,
                                    default_ladder=LADDER, log_format="json")
            app = build(settings, actor="bench")
            try:
                run(app, ladders_dir, args.n, args.batch_size)
            finally:
                app.close()
    finally:
        print(f"cleanup: unlinked {unlink_namespace(args.redis_url, namespace)} Redis keys; "
              f"dropping {name}")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


if __name__ == "__main__":
    main()
