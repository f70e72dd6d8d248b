"""Projection-check benchmark: N disputes (3 ledger rows each) compared with their ledger,
printing disputes/s and peak RSS.

Creates a scratch database (dropped at the end), migrates it, generates N projection rows
and 3N ledger rows (ENQUEUED with a regulatory deadline, PROMOTED, WARNING: synthetic rows
whose columns agree with their projection; the hashes are not valid chains, the projection
check does not read them), edits one projection row's tier, then runs
``adapters.projection_scan.projection_differences`` (what ``audit verify`` and ``reconcile``
run) over all of them in one REPEATABLE READ snapshot.

    python tests/benchmarks/projection_check.py [--disputes 100000]
        [--admin-url postgresql://postgres@127.0.0.1:5432/postgres]

Peak RSS (``resource.getrusage``, the process peak) is printed before and after the check:
a streamed check barely moves it.
"""

from __future__ import annotations

import argparse
import resource
import time
import uuid

import sqlalchemy as sa

from escalation.adapters import db
from escalation.adapters.projection_scan import projection_differences

STATES = """
INSERT INTO escalation_state (dispute_id, status, tier, ladder, ladder_version, due_at,
    entered_tier_at, materiality, source_hash, trace_id, deadlines, last_seq, last_hash,
    created_at)
SELECT md5(g::text)::uuid, 'pending', 'senior', 'dispute_review', 1,
       timestamptz '2026-12-20 09:00+00' + make_interval(secs => g),
       timestamptz '2026-12-01 09:00+00', 1250.00, 'ab', 'trace-' || g,
       '[["reg", "2026-12-30T09:00:00+00:00"]]'::jsonb, 3, sha256(int8send(g)),
       date_trunc('month', now()) + interval '1 hour'
  FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS g
"""
LEDGER = """
INSERT INTO escalation_audit (dispute_id, seq, event, match_decision, from_tier, to_tier,
    ladder, ladder_version, materiality, next_due_at, decided_at, actor, trace_id,
    source_hash, details, prev_hash, row_hash, chain_created_at)
SELECT md5(g::text)::uuid, s, (ARRAY['ENQUEUED', 'PROMOTED', 'WARNING'])[s], 'x', 'standard',
       CASE s WHEN 1 THEN 'standard' ELSE 'senior' END, 'dispute_review', 1, 1250.00,
       CASE s WHEN 1 THEN timestamptz '2026-12-10 09:00+00'
              ELSE timestamptz '2026-12-20 09:00+00' + make_interval(secs => g) END,
       now(), 'worker', 'trace-' || g, 'ab',
       CASE s WHEN 1 THEN '{"deadlines": {"reg": "2026-12-30T09:00:00+00:00"}}'::jsonb
              ELSE '{"fraction": "0.5"}'::jsonb END,
       sha256(int8send(s)), sha256(int8send(g * 4 + s)),
       date_trunc('month', now()) + interval '1 hour'
  FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS g,
       generate_series(1, 3) AS s
"""
EDITED = "UPDATE escalation_state SET tier = 'compliance' WHERE dispute_id = md5('7')::uuid"


def generate(engine: sa.Engine, disputes: int, chunk: int = 100_000) -> None:
    """Insert ``disputes`` projection rows and their ledger rows (in chunks of ``chunk``)."""
    with engine.begin() as conn:
        for lo in range(1, disputes + 1, chunk):
            bounds = {"lo": lo, "hi": min(lo + chunk - 1, disputes)}
            conn.execute(sa.text(STATES), bounds)
            conn.execute(sa.text(LEDGER), bounds)
        conn.execute(sa.text(EDITED))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE escalation_state"))
        conn.execute(sa.text("ANALYZE escalation_audit"))


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, MiB (Linux ru_maxrss is KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    """Run the benchmark and print the figures."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--disputes", type=int, default=100_000)
    ap.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = ap.parse_args()
    admin_url = db.normalize_url(args.admin_url)
    name = f"escalation_bench_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        db.upgrade_to_head(url)
        engine = db.make_engine(url)
        t0 = time.perf_counter()
        generate(engine, args.disputes)
        print(f"generated {args.disputes} disputes, {3 * args.disputes} ledger rows in "
              f"{time.perf_counter() - t0:.1f} s")
        print(f"peak RSS before the check: {peak_rss_mib():.1f} MiB")
        repeatable = engine.connect().execution_options(isolation_level="REPEATABLE READ")
        with repeatable as conn, conn.begin():
            t0 = time.perf_counter()
            found = list(projection_differences(conn))
            took = time.perf_counter() - t0
        print(f"checked {args.disputes} disputes in {took:.1f} s: "
              f"{args.disputes / took:,.0f} disputes/s; differing: "
              f"{[(str(d), [c.column.value for c in cols]) for d, cols in found]}")
        print(f"peak RSS after the check: {peak_rss_mib():.1f} MiB")
        engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


if __name__ == "__main__":
    main()
