"""The CLI commands a dispute service and an operator use: enqueue, status, audit show,
cancel, worker refusing a database that is not at the Alembic head."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from tests.e2e.helpers import due_requests, enqueue
from tests.helpers import run_cli

HASH = "cd" * 32


def test_enqueue_twice_says_nothing_changed_and_audit_show_lists_the_trail(
    app: Any, cli_env: dict[str, str]
) -> None:
    did = str(uuid.uuid4())
    due = (app.scheduler.time() + timedelta(hours=1)).isoformat()
    args = ["enqueue", "--dispute-id", did, "--source-hash", HASH, "--materiality", "1250.00",
            "--due-at", due, "--json"]
    first = run_cli(cli_env, *args)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["created"] is True
    second = run_cli(cli_env, *args[:-1])
    assert second.returncode == 0 and "nothing changed" in second.stdout
    assert "source hash differs" not in second.stderr
    # the same dispute with another source record: still not rewritten, but said
    other = run_cli(cli_env, *[("ef" * 32) if a == HASH else a for a in args])
    assert other.returncode == 0, other.stderr
    assert json.loads(other.stdout)["source_hash_differs"] is True
    assert json.loads(other.stdout)["created"] is False
    other_text = run_cli(cli_env, *[("ef" * 32) if a == HASH else a for a in args[:-1]])
    assert "nothing changed" in other_text.stdout
    assert f"source hash differs from the recorded one ({HASH[:12]}...)" in other_text.stderr
    # the note suggests no path that fails: a cancelled escalation is never re-opened
    assert "never re-opens a cancelled or terminal one" in other_text.stderr
    assert "enqueue again" not in other_text.stderr
    shown = run_cli(cli_env, "audit", "show", did, "--json")
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [r["match_decision"] for r in rows] == ["ENQUEUED"]
    assert rows[0]["materiality"] == "1250.00" and rows[0]["source_hash"] == HASH
    cancelled = run_cli(cli_env, "cancel", did, "--reason", "resolved for cardholder")
    assert cancelled.returncode == 0, cancelled.stderr
    shown = run_cli(cli_env, "audit", "show", did, "--json")
    assert [json.loads(x)["match_decision"] for x in shown.stdout.splitlines()] == [
        "ENQUEUED", "CANCELLED"]
    assert app.scheduler.payload(uuid.UUID(did)) is None
    again = run_cli(cli_env, *args[:-1])  # as the note says: not re-opened
    assert again.returncode == 2 and "already has a cancelled escalation" in again.stderr


def test_status_reports_pending_due_locked_and_per_tier(
    app: Any, cli_env: dict[str, str]
) -> None:
    now = app.scheduler.time()
    enqueue(app, due_requests(3, now))
    enqueue(app, due_requests(2, now, tier="senior", past_s=-3600))
    claim = app.scheduler.claim(1, 30_000, "holder")
    assert len(claim.items) == 1
    res = run_cli(cli_env, "status", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    redis_part = data["redis"]
    assert redis_part["pending"] == 5
    assert redis_part["due_now"] == 2  # the claimed one was re-scored to now + lease
    assert redis_part["locked"] == 1
    assert redis_part["oldest_overdue_ms"] >= 5000
    pending_by_tier = data["postgres"]["pending_by_tier"]
    assert pending_by_tier["standard"] >= 3 and pending_by_tier["senior"] >= 2
    table = run_cli(cli_env, "status")
    assert table.returncode == 0 and "redis.pending" in table.stdout
    # ages in human units, not raw milliseconds
    (row,) = [line for line in table.stdout.splitlines() if "redis.oldest_overdue" in line]
    assert "oldest_overdue_ms" not in row
    assert re.search(r"\b\d+ s\b|\b\d+ min\b", row), row


def test_worker_refuses_a_database_not_at_the_alembic_head(
    database_url: str, cli_env: dict[str, str]
) -> None:
    name = f"escalation_unmigrated_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(database_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        url = sa.engine.make_url(database_url).set(database=name).render_as_string(
            hide_password=False)
        # a setup step not taken, like a bad setting: exit 2 (it was 1, as for an outage)
        for cmd in (["worker", "--burst"], ["status"]):
            res = run_cli(dict(cli_env, ESCALATION_DATABASE_URL=url), *cmd)
            assert res.returncode == 2, (cmd, res.returncode, res.stderr)
            assert "escalation db upgrade" in res.stderr and "Traceback" not in res.stderr
            assert len(res.stderr.strip().splitlines()) == 1, res.stderr
        up = run_cli(dict(cli_env, ESCALATION_DATABASE_URL=url), "db", "upgrade")
        assert up.returncode == 0, up.stderr
        res = run_cli(dict(cli_env, ESCALATION_DATABASE_URL=url), "worker", "--burst")
        assert res.returncode == 0, res.stderr
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def test_the_first_command_on_a_new_database_logs_the_ladder_baseline_in_one_line(
    cli_env: dict[str, str], server_urls: tuple[str, str], redis_client: Any
) -> None:
    from tests.conftest import scratch_database

    with scratch_database(server_urls[1], "escalation_first") as url:
        env = dict(cli_env, ESCALATION_DATABASE_URL=url)  # the test's namespace: cleaned up
        first = run_cli(env, "status")
        assert first.returncode == 0, first.stderr
        events = [json.loads(ln) for ln in first.stderr.splitlines() if ln.startswith("{")]
        ladder_events = [e for e in events if e["event"].startswith("ladder.")]
        assert [e["event"] for e in ladder_events] == ["ladder.baseline_released"]
        assert ladder_events[0]["count"] == len(ladder_events[0]["versions"]) >= 5
        assert "dispute_review@1" in ladder_events[0]["versions"]
        again = run_cli(env, "status")
        assert again.returncode == 0 and "ladder." not in again.stderr


def test_audit_show_keeps_seq_and_instants_whole_at_any_width(
    app: Any, cli_env: dict[str, str]
) -> None:
    did = str(uuid.uuid4())
    due = (app.scheduler.time() + timedelta(hours=1)).replace(microsecond=0)
    res = run_cli(cli_env, "enqueue", "--dispute-id", did, "--source-hash", HASH,
                  "--materiality", "10.00", "--due-at", due.isoformat())
    assert res.returncode == 0, res.stderr
    shown_due = due.strftime("%Y-%m-%d %H:%M:%S")
    wide = run_cli(dict(cli_env, COLUMNS="220"), "audit", "show", did)
    assert wide.returncode == 0, wide.stderr
    assert "…" not in wide.stdout and shown_due in wide.stdout
    assert "calendar" in wide.stdout and "decided (Redis TIME)" in wide.stdout
    assert re.search(r"│ 1 +│ ENQUEUED", wide.stdout), wide.stdout
    narrow = run_cli(dict(cli_env, COLUMNS="100"), "audit", "show", did)
    assert narrow.returncode == 0, narrow.stderr
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 100
    assert "ENQUEUED" in narrow.stdout and due.strftime("%m-%d %H:%M:%S") in narrow.stdout
    assert "needs 160 columns, this output has 100" in narrow.stdout


def test_enqueue_names_a_dispute_by_source_and_external_id_as_the_api_does(
    app: Any, cli_env: dict[str, str]
) -> None:
    from escalation.service_layer.disputes import resolve_dispute

    ext = f"CASE-{uuid.uuid4().hex[:8]}"
    due = (app.scheduler.time() + timedelta(hours=1)).isoformat()
    res = run_cli(cli_env, "enqueue", "--source", "crm", "--external-id", ext,
                  "--source-hash", HASH, "--due-at", due, "--json")
    assert res.returncode == 0, res.stderr
    did = json.loads(res.stdout)["dispute_id"]
    assert did == str(resolve_dispute(source="crm", external_id=ext)[0])  # the API's id
    state = app.store.get(uuid.UUID(did))[0]
    assert state.external_id == ext
    alone = run_cli(cli_env, "cancel", ext)  # the external id without its source
    assert alone.returncode == 2, alone.stderr
    assert "must be a UUID" in alone.stderr and "the source" in alone.stderr, alone.stderr
    cancelled = run_cli(cli_env, "cancel", ext, "--source", "crm")
    assert cancelled.returncode == 0 and did in cancelled.stdout, cancelled.stderr
    for bad, message in (([], "give --dispute-id, or --source and --external-id"),
                         (["--source", "crm"], "go together"),
                         (["--source", "crm", "--external-id", ext, "--dispute-id", did],
                          "not both")):
        refused = run_cli(cli_env, "enqueue", "--source-hash", HASH, "--due-at", due, *bad)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
