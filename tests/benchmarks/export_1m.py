"""Export benchmark: 1,000,000 ledger rows -> CSV/JSONL, printing rows/s and peak RSS.

Creates a scratch database (dropped at the end), migrates it, generates N rows with one
``INSERT ... SELECT generate_series`` (synthetic rows: valid columns, not valid chains),
then streams them out with ``escalation.service_layer.audit_export.export``.

    python tests/benchmarks/export_1m.py [--rows 1000000] [--format csv]
        [--admin-url postgresql://postgres@127.0.0.1:5432/postgres]

Peak RSS comes from ``resource.getrusage`` (Linux: KiB); it is the process peak, so it is
printed before and after the export: a constant-memory export barely moves it.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

from escalation.adapters import db
from escalation.adapters.audit_search import PostgresLedgerSearch
from escalation.service_layer.audit_export import AuditFilter, export

GENERATE = """
INSERT INTO escalation_audit (dispute_id, seq, event, match_decision, from_tier, to_tier,
    ladder, ladder_version, calendar_version, materiality, due_at, next_due_at, decided_at,
    actor, trace_id, source_hash, details, prev_hash, row_hash, chain_created_at)
SELECT md5(g::text)::uuid, 1, 'PROMOTED', 'PROMOTED_TO_SENIOR', 'standard', 'senior',
       'dispute_review', 1, 'fed-2026', (g % 100000) / 100.0,
       now() - interval '1 hour', now() + interval '1 day',
       now() - make_interval(secs => g % 86400),
       'worker-' || (g % 16), 'trace-' || g, repeat('ab', 32), '{}'::jsonb,
       decode(repeat('00', 32), 'hex'), sha256(int8send(g)), now()
  FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS g
"""


def generate(engine: sa.Engine, rows: int, chunk: int = 200_000) -> None:
    """Insert ``rows`` synthetic ledger rows (in chunks of ``chunk``)."""
    with engine.begin() as conn:
        for lo in range(1, rows + 1, chunk):
            conn.execute(sa.text(GENERATE), {"lo": lo, "hi": min(lo + chunk - 1, rows)})


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, MiB (Linux ru_maxrss is KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    """Run the benchmark and print the figures."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--format", choices=["csv", "jsonl"], default="csv")
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
        generate(engine, args.rows)
        print(f"generated {args.rows} rows in {time.perf_counter() - t0:.1f} s")
        print(f"peak RSS before export: {peak_rss_mib():.1f} MiB")
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / f"audit.{args.format}"
            t0 = time.perf_counter()
            manifest = export(PostgresLedgerSearch(engine), args.format, out, AuditFilter())
            took = time.perf_counter() - t0
            size = out.stat().st_size / 2**20
        print(f"exported {manifest.row_count} rows ({size:.0f} MiB) in {took:.1f} s: "
              f"{manifest.row_count / took:,.0f} rows/s")
        print(f"peak RSS after export: {peak_rss_mib():.1f} MiB")
        engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


if __name__ == "__main__":
    main()
