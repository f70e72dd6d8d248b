"""The CLI scripts well (docs/cli.md): stdout carries only command output (log records go to
stderr, even from commands that never build the application), --json output parses whole,
summaries are on stdout, a name that does not exist exits 3, and `token create` prints the
secret alone on its first line."""

from __future__ import annotations

import json
import uuid
from typing import Any

import sqlalchemy as sa

from tests.helpers import run_cli


def test_db_upgrade_json_is_the_whole_stdout_and_its_logs_go_to_stderr(
    database_url: str, cli_env: dict[str, str]
) -> None:
    name = f"escalation_scripting_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(database_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        url = sa.engine.make_url(database_url).set(database=name).render_as_string(
            hide_password=False)
        env = dict(cli_env, ESCALATION_DATABASE_URL=url, ESCALATION_LOG_FORMAT="json",
                   ESCALATION_LOG_LEVEL="DEBUG", ESCALATION_NAMESPACE=f"s{uuid.uuid4().hex[:8]}")
        res = run_cli(env, "db", "upgrade", "--json")
        assert res.returncode == 0, res.stderr[-2000:]
        data = json.loads(res.stdout)  # nothing but the one document: no log line in it
        assert data["applied"] and data["applied"][-1].startswith(data["head"])
        assert data["namespace"] == env["ESCALATION_NAMESPACE"]
        # the records it logs are JSON lines on stderr
        records = [json.loads(line) for line in res.stderr.splitlines()
                   if line.startswith("{")]
        assert records and all("event" in r and "level" in r for r in records)
        again = run_cli(env, "db", "upgrade")
        assert again.returncode == 0, again.stderr[-2000:]
        assert again.stdout.startswith("database already at head"), again.stdout
        assert not any(line.lstrip().startswith("{") for line in again.stdout.splitlines())
    finally:
        admin.dispose()
        engine = sa.create_engine(database_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        engine.dispose()


def test_not_found_exits_3_and_a_usage_error_2(app: Any, cli_env: dict[str, str]) -> None:
    missing = run_cli(cli_env, "dead", "show", "decision:no-such-member")
    assert missing.returncode == 3, (missing.stdout, missing.stderr)
    assert missing.stderr.startswith("error: no dead letter")
    unknown = run_cli(cli_env, "audit", "show", str(uuid.uuid4()))
    assert unknown.returncode == 3, unknown.stderr
    usage = run_cli(cli_env, "dead", "show")  # the member argument is missing
    assert usage.returncode == 2


def test_worker_burst_summary_is_on_stdout_and_json_on_request(
    app: Any, cli_env: dict[str, str]
) -> None:
    plain = run_cli(cli_env, "worker", "--burst")
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert plain.stdout.startswith("burst done: "), (plain.stdout, plain.stderr[-500:])
    as_json = run_cli(cli_env, "worker", "--burst", "--json")
    assert as_json.returncode == 0, as_json.stderr[-2000:]
    figures = json.loads(as_json.stdout)
    assert set(figures) == {"claimed", "recorded", "already_decided", "stuck_repaired",
                            "not_decided", "warnings_recorded"}
    refused = run_cli(cli_env, "worker", "--json")  # --json reports a burst only
    assert refused.returncode == 2 and "--json goes with --burst" in refused.stderr


def test_token_create_prints_the_secret_alone_on_its_first_line(
    app: Any, cli_env: dict[str, str]
) -> None:
    name = f"svc-{uuid.uuid4().hex[:8]}"
    res = run_cli(cli_env, "token", "create", "--name", name, "--role", "service")
    assert res.returncode == 0, res.stderr[-2000:]
    first, second = res.stdout.splitlines()[:2]
    assert first.strip() == first and " " not in first and len(first) >= 32
    assert second.startswith(f"^ token {name} ") and "shown once" in second
    revoked = run_cli(cli_env, "token", "revoke", name, "--json")
    assert revoked.returncode == 0, revoked.stderr
    assert json.loads(revoked.stdout)["revoked"] is True


def test_json_of_commands_that_printed_text_parses_whole(
    app: Any, cli_env: dict[str, str]
) -> None:
    checked = run_cli(cli_env, "ladder", "check", "--json")
    assert checked.returncode == 0, checked.stderr[-2000:]
    report = json.loads(checked.stdout)
    assert report["ok"] is True and report["files"] > 0 and report["errors"] == []
    dead = run_cli(cli_env, "dead", "list", "--json")
    assert dead.returncode == 0 and json.loads(dead.stdout) == []
    ran = run_cli(cli_env, "maintenance", "run", "--json")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert isinstance(json.loads(ran.stdout)["ran"], list)


def test_worker_burst_counts_the_warnings_it_recorded(
    app: Any, cli_env: dict[str, str]
) -> None:
    """A burst that records only pre-breach warnings says so: "0 recorded" alone read as a
    run that did nothing, while the ledger gained SLA_WARNING rows."""
    import hashlib
    from datetime import timedelta

    from escalation.bootstrap import schedule_for
    from escalation.service_layer.core import CorePorts
    from escalation.service_layer.enqueue import EnqueueOne, EnqueueRequest, enqueue_on_breach

    did = uuid.uuid4()
    now = app.scheduler.time()
    enqueue_on_breach(  # a 24 h tier opened 13 h ago: its 50% warning (12 h) is due
        EnqueueOne(request=EnqueueRequest(dispute_id=did, materiality="10.00",
                                          source_hash=hashlib.sha256(did.bytes).hexdigest(),
                                          opened_at=now - timedelta(hours=13)),
                   actor="test", default_ladder="dispute_review"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
        schedule_for(app))
    res = run_cli(cli_env, "worker", "--burst", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    figures = json.loads(res.stdout)
    warned = [r for r in app.store.trail(did) if r.match_decision.startswith("SLA_WARNING")]
    assert [r.match_decision for r in warned] == ["SLA_WARNING_50"]
    assert figures["warnings_recorded"] >= 1
