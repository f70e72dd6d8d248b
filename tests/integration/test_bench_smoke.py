"""Smoke runs of every ``escalation bench`` scenario at a tiny size.

They prove each scenario runs end to end on real servers, prints well-formed figures and,
for drain, that the ledger holds exactly one PROMOTED row per escalation. Timings are
never asserted: this 2-core machine is shared.
"""

from __future__ import annotations

import json
import shutil
import uuid
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from tests.helpers import run_cli

pytestmark = pytest.mark.bench

needs_bullmq = pytest.mark.skipif(
    shutil.which("node") is None or shutil.which("npm") is None
    or shutil.which("redis-server") is None,
    reason="compare needs node, npm (BullMQ from the npm registry) and redis-server")


def _bench(env: dict[str, str], *args: str) -> tuple[dict[str, Any], str]:
    """Run ``escalation bench ARGS --json-only``; return the JSON figures and the summary."""
    proc = run_cli(env, "bench", *args, "--json-only", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    data = next(json.loads(ln) for ln in lines if ln.startswith("{"))
    summary = next(ln for ln in lines if ln.startswith("SUMMARY "))
    assert len(data["load"]) == 3
    return data, summary


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and value >= 0


def test_drain_applies_every_escalation_once_and_the_ledger_count_passes(
    cli_env: dict[str, str], database_url: str
) -> None:
    data, summary = _bench(cli_env, "drain", "--n", "300", "--workers", "1,2",
                           "--batch-size", "100", "--lead-s", "3",
                           "--database-url", database_url)
    assert data["ok"] is True
    assert [(r["workers"], r["batch_size"]) for r in data["runs"]] == [(1, 100), (2, 100)]
    for run in data["runs"]:
        assert run["ledger_rows"] == 300 and run["ledger_distinct"] == 300
        assert run["events"] == 300
        assert _number(run["rate_per_s"]) and run["rate_per_s"] > 0
        assert all(_number(run["lag_ms"][k]) for k in ("p50", "p99", "max"))
        assert run["lag_ms"]["p50"] <= run["lag_ms"]["p99"] <= run["lag_ms"]["max"]
    assert summary.startswith("SUMMARY drain: N=300") and "ledger PASS" in summary


def test_precision_reports_one_lag_per_round(cli_env: dict[str, str], database_url: str) -> None:
    data, summary = _bench(cli_env, "precision", "--rounds", "2", "--ahead-s", "1",
                           "--database-url", database_url)
    assert len(data["lags_ms"]) == 2
    assert data["lag_ms"]["p50"] <= data["lag_ms"]["p99"] <= data["lag_ms"]["max"]
    assert summary.startswith("SUMMARY precision: 2 rounds")


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_idle_counts_the_commands_of_the_idle_worker(cli_env: dict[str, str]) -> None:
    """Also exercises the path that creates and drops its own database."""
    data, summary = _bench(cli_env, "idle", "--seconds", "3", "--poll-interval-s", "1")
    assert data["private_redis"] is True
    assert _number(data["cmds_per_s_per_worker"])
    assert data["commands"] == sum(data["by_command"].values())
    assert "blpop" in data["by_command"]  # the idle worker blocks instead of polling
    assert "info" not in data["by_command"]  # the bench's own INFO is not counted
    assert summary.startswith("SUMMARY idle: poll 1 s, 1 worker(s)")


@needs_bullmq
def test_compare_runs_both_systems_and_measures_cpu(
    cli_env: dict[str, str], database_url: str
) -> None:
    data, summary = _bench(cli_env, "compare", "--n", "200", "--rounds", "2",
                           "--batch-size", "100", "--concurrency", "20", "--lead-s", "4",
                           "--bullmq-job", "empty", "--database-url", database_url)
    assert data["ok"] is True and data["bullmq_jobs"] == ["empty"]
    assert data["audit_ok"] is None  # no audit job, no audit database
    assert [r["order"] for r in data["rounds"]] == [["escalation", "bullmq:empty"],
                                                     ["bullmq:empty", "escalation"]]
    for rnd in data["rounds"]:
        assert rnd["escalation"]["ledger_rows"] == 200
        assert rnd["bullmq"]["empty"]["completed"] == 200
        for figures in (rnd["escalation"], rnd["bullmq"]["empty"]):
            assert figures["rate_per_s"] > 0 and figures["cpu_us_per_item"] > 0
            assert figures["cpu_s"]["workers"] > 0 and figures["cpu_s"]["redis"] > 0
            assert figures["lag_ms"]["p50"] <= figures["lag_ms"]["p99"]
        assert rnd["ratio"]["empty"] == round(rnd["escalation"]["rate_per_s"]
                                              / rnd["bullmq"]["empty"]["rate_per_s"], 3)
    assert summary.startswith("SUMMARY compare: N=200 W=2") and "ledger PASS" in summary
    assert "ratio min/median empty " in summary and "audit rows" not in summary


@needs_bullmq
def test_compare_audit_job_writes_exactly_one_postgres_row_per_bullmq_job(
    cli_env: dict[str, str], database_url: str
) -> None:
    """The default comparison: BullMQ's 'audit' processor INSERTs one audit row per job into
    a table of its own; with --keep-audit-database the tables stay, and PostgreSQL itself
    shows one row per job and per dispute in every round. The default also runs the empty
    job and reports both ratios."""
    keep = f"escbench_smoke_{uuid.uuid4().hex[:8]}_bullmq"
    admin = sa.create_engine(database_url.replace("postgresql://", "postgresql+psycopg://", 1),
                             isolation_level="AUTOCOMMIT")
    kept = sa.create_engine(sa.make_url(admin.url).set(database=keep), poolclass=NullPool)
    try:
        data, summary = _bench(cli_env, "compare", "--n", "150", "--rounds", "2",
                               "--batch-size", "100", "--concurrency", "20", "--lead-s", "4",
                               "--bullmq-pg-pool", "4", "--keep-audit-database", keep,
                               "--database-url", database_url)
        with kept.connect() as conn:
            tables = conn.execute(sa.text(
                r"SELECT tablename FROM pg_tables WHERE tablename LIKE 'bullmq\_audit\_%'"
            )).scalars().all()
            rows = {t: tuple(conn.execute(sa.text(
                f"SELECT count(*), count(DISTINCT job_id), count(DISTINCT dispute_id), "
                f"count(*) FILTER (WHERE event = 'PROMOTED') FROM {t}")).one())
                for t in tables}
    finally:
        kept.dispose()
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{keep}" WITH (FORCE)')
        admin.dispose()
    assert data["ok"] is True and data["audit_ok"] is True and data["audit_database"] == keep
    assert data["bullmq_jobs"] == ["audit", "empty"] and data["pg_pool"] == 4
    assert [r["order"] for r in data["rounds"]] == [
        ["escalation", "bullmq:audit", "bullmq:empty"],
        ["bullmq:empty", "bullmq:audit", "escalation"]]
    # PostgreSQL itself: one table per round, one row per job, one per dispute
    assert set(rows) == {r["bullmq"]["audit"]["audit_table"] for r in data["rounds"]}
    assert len(rows) == 2 and all(v == (150, 150, 150, 150) for v in rows.values()), rows
    for rnd in data["rounds"]:
        audit = rnd["bullmq"]["audit"]
        assert audit["completed"] == 150
        assert audit["audit_rows"] == audit["audit_distinct_jobs"] == 150
        assert audit["cpu_s"]["postgres"] >= 0 and "postgres" in rnd["escalation"]["cpu_s"]
        assert audit["pg_backends"] == 2 * 4 and audit["pg_backends_lost"] == 0
        assert set(rnd["ratio"]) == {"audit", "empty"}
        assert rnd["ratio"]["audit"] == round(rnd["escalation"]["rate_per_s"]
                                              / audit["rate_per_s"], 3)
    median = data["median"]["bullmq"]
    assert median["audit"]["ratio_min"] == min(r["ratio"]["audit"] for r in data["rounds"])
    assert "jobs=audit,empty" in summary and "ratio min/median audit " in summary
    assert ", empty " in summary and "audit rows PASS" in summary


@needs_bullmq
def test_compare_drops_its_audit_database(cli_env: dict[str, str], database_url: str) -> None:
    """Without --keep-audit-database BullMQ's audit database is gone after the run."""
    data, _ = _bench(cli_env, "compare", "--n", "50", "--rounds", "1", "--batch-size", "50",
                     "--concurrency", "10", "--lead-s", "3", "--bullmq-job", "audit",
                     "--database-url", database_url)
    assert data["audit_ok"] is True and data["audit_database"].startswith("escbench_")
    admin = sa.create_engine(database_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with admin.connect() as conn:
            left = conn.execute(sa.text("SELECT count(*) FROM pg_database WHERE datname = :n"),
                                {"n": data["audit_database"]}).scalar_one()
    finally:
        admin.dispose()
    assert left == 0


@needs_bullmq
def test_compare_escalate_job_moves_every_bullmq_job_to_the_next_tier(
    cli_env: dict[str, str], database_url: str
) -> None:
    """The 'escalate' BullMQ processor does the work of an escalation's apply: every job
    lands in the next tier's delayed queue once and leaves one review-stream entry."""
    data, summary = _bench(cli_env, "compare", "--n", "150", "--rounds", "1",
                           "--batch-size", "100", "--concurrency", "20", "--lead-s", "4",
                           "--bullmq-job", "escalate", "--database-url", database_url)
    assert data["ok"] is True and data["bullmq_jobs"] == ["escalate"]
    bull = data["rounds"][0]["bullmq"]["escalate"]
    assert bull["job"] == "escalate" and bull["completed"] == 150
    assert bull["next_tier_jobs"] == 150 and bull["review_entries"] == 150
    assert "jobs=escalate" in summary


@pytest.mark.parametrize("jobs", ["sleep", "audit,sleep", "audit,audit", ","])
def test_compare_refuses_an_unknown_or_repeated_bullmq_job(
    cli_env: dict[str, str], jobs: str
) -> None:
    proc = run_cli(cli_env, "bench", "compare", "--bullmq-job", jobs)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--bullmq-job" in proc.stdout + proc.stderr


def test_enqueue_reports_all_four_apis(cli_env: dict[str, str], database_url: str) -> None:
    data, _ = _bench(cli_env, "enqueue", "--n", "200", "--n-single", "20", "--batch", "100",
                     "--database-url", database_url)
    for kind, n in (("single", 20), ("batched", 200), ("redis_single", 20),
                    ("redis_batched", 200)):
        assert data[kind]["n"] == n and data[kind]["per_s"] > 0


def test_scale_reports_memory_and_claim_latency_per_size(
    cli_env: dict[str, str], database_url: str
) -> None:
    data, summary = _bench(cli_env, "scale", "--sizes", "200,400", "--rounds", "2",
                           "--claim-batch", "10", "--database-url", database_url)
    assert [r["size"] for r in data["sizes"]] == [200, 400]
    for row in data["sizes"]:
        assert row["claims"] == 2 and row["claim_ms_p50"] > 0
        assert isinstance(row["bytes_per_pending"], int | float)
    assert "claim ratio" in summary


def test_bench_leaves_no_keys_and_no_database_behind(
    cli_env: dict[str, str], redis_url: str, database_url: str
) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    before = set(client.scan_iter(match="*{bench-*", count=1000))
    admin = sa.create_engine(database_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with admin.connect() as conn:
            dbs_before = set(conn.execute(sa.text(
                "SELECT datname FROM pg_database WHERE datname LIKE 'escbench_%'")).scalars())
        _bench(cli_env, "enqueue", "--n", "50", "--n-single", "5", "--batch", "50")
        with admin.connect() as conn:
            dbs_after = set(conn.execute(sa.text(
                "SELECT datname FROM pg_database WHERE datname LIKE 'escbench_%'")).scalars())
    finally:
        admin.dispose()
    after = set(client.scan_iter(match="*{bench-*", count=1000))
    client.close()
    assert after <= before  # every key the run wrote was UNLINKed
    assert dbs_after <= dbs_before  # its own database was dropped


def test_api_bench_sends_real_requests_and_the_ledger_holds_each_one(
    cli_env: dict[str, str], database_url: str
) -> None:
    data, summary = _bench(cli_env, "api", "--batches", "2", "--batch-size", "50",
                           "--single-n", "40", "--concurrency", "4", "--rate", "20",
                           "--seconds", "1", "--database-url", database_url)
    assert data["ok"] is True
    assert data["uvicorn_workers"] == 2
    assert data["batch"]["status"] == {"200": 2}
    assert data["single"]["status"] == {"201": 40}
    assert data["fixed_rate"]["status"] == {"201": 20}
    assert data["ledger"]["sent"] == data["ledger"]["enqueued_rows"] == 200 + 100 + 40 + 20
    lat = data["fixed_rate"]["latency_ms"]
    assert _number(lat["p50"]) and lat["p50"] <= lat["p99"] <= lat["max"]
    assert summary.startswith("SUMMARY api: 2 uvicorn workers, aiohttp client")
    assert "ledger PASS" in summary


def test_api_overload_bench_counts_accepted_and_shed_and_the_ledger_holds_the_accepted(
    cli_env: dict[str, str], database_url: str
) -> None:
    data, summary = _bench(cli_env, "api-overload", "--seconds", "1", "--capacity-n", "100",
                           "--max-in-flight", "2", "--workers", "1", "--connections", "16",
                           "--database-url", database_url)
    assert data["ok"] is True
    for phase, limit in ((data["shedding"], 2), (data["unbounded"], 100_000)):
        assert phase["max_in_flight"] == limit
        assert phase["accepted"] + phase["shed_503"] + phase["other"] == phase["sent"] > 0
        assert phase["ledger_ok"] is True
        assert phase["exit_code_on_sigterm"] == 0  # serve drained and exited cleanly
        assert _number(phase["capacity_per_s"]) and phase["offered_per_s"] > 0
    assert data["unbounded"]["shed_503"] == 0  # a server that does not shed never says 503
    assert data["shedding"]["offered_per_s"] == data["unbounded"]["offered_per_s"]
    assert summary.startswith("SUMMARY api-overload: 1 uvicorn workers, max in flight 2/")
    assert "ledger PASS" in summary


def test_notify_delivers_every_notification_signed_and_in_order_per_dispute(
    cli_env: dict[str, str], database_url: str
) -> None:
    data, summary = _bench(cli_env, "notify", "--n", "20", "--per-dispute", "2",
                           "--delay-ms", "10", "--concurrency", "4",
                           "--database-url", database_url)
    assert data["deliveries"] == 20 and data["verified"] == data["requests"] == 20
    assert data["order_ok"] is True and data["same_dispute_overlaps"] == 0
    assert 1 <= data["connections"] <= 4 and _number(data["seconds"])
    assert summary.startswith("SUMMARY notify: 20 deliveries to a 10 ms receiver, concurrency 4")


def test_ledger_builds_a_verifiable_ledger_of_cloned_chains(
    cli_env: dict[str, str], database_url: str
) -> None:
    """2,000 disputes cloned from chains the product made, over 24 monthly partitions: every
    audit answer runs and exits 0, ``audit verify --all`` and both seals included."""
    data, summary = _bench(cli_env, "ledger", "--disputes", "2000", "--months", "24",
                           "--changes", "40", "--database-url", database_url)
    build, ledger = data["build"], data["ledger"]
    assert build["disputes"] == 2000 and build["rows"] >= 2000 * 3
    assert ledger["months_with_disputes"] == 24 and ledger["partitions"] >= 24
    statuses = ledger["statuses"]
    assert statuses.get("pending", 0) > 0 and statuses.get("terminal", 0) > 0
    assert statuses.get("resolved", 0) > 0 and statuses.get("cancelled", 0) > 0
    assert len(ledger["ladders"]) >= 3
    audit = data["audit"]
    for name in ("show_uuid", "show_external_id", "search_dispute", "search_month_tier",
                 "export_month", "verify_all", "checkpoint_first", "checkpoint_incremental"):
        assert audit[name]["exit"] == 0, (name, audit[name])
        assert _number(audit[name]["s"])
    assert audit["export_month"]["bytes"] > 0
    assert audit["checkpoint_incremental"]["changed"] == 40
    assert summary.startswith("SUMMARY ledger: 2,000 disputes")
