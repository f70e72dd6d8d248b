"""A database restored to an earlier point under a namespace whose Redis is newer
(docs/adr/0014-redis-ahead-of-the-ledger.md, docs/postgresql.md "Restoring the database").

Real PostgreSQL (pg_dump / pg_restore into a new database) and real Redis, the CLI as an
operator runs it: `db upgrade` refuses the restored database until `--restored`; then
`doctor` fails, the worker refuses to fire, `reconcile` resets Redis to the ledger (one
SCHEDULE_RESET row per lost decision, naming the review-stream entry), and a worker burst
decides every escalation exactly once.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from tests.conftest import scratch_database
from tests.e2e.test_cli_bad_input import GOOD_HASH
from tests.helpers import run_cli

pytestmark = pytest.mark.skipif(shutil.which("pg_dump") is None
                                or shutil.which("pg_restore") is None,
                                reason="pg_dump / pg_restore not installed")


@pytest.fixture()
def two_dbs(server_urls: tuple[str, str]) -> Iterator[tuple[str, str]]:
    with scratch_database(server_urls[1], "escalation_ahead_a") as a, \
            scratch_database(server_urls[1], "escalation_ahead_b", migrate=False) as b:
        yield a, b


def _libpq(url: str) -> str:
    return sa.engine.make_url(url).set(drivername="postgresql").render_as_string(
        hide_password=False)


def _ledger(url: str, ids: list[str]) -> dict[str, list[tuple[int, str, str]]]:
    """The ledger rows of the disputes ``ids``: (seq, event, match_decision) in order."""
    engine = sa.create_engine(sa.engine.make_url(url).set(drivername="postgresql+psycopg"))
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(
                "SELECT dispute_id::text, seq, event, match_decision FROM escalation_audit "
                "WHERE dispute_id = ANY(CAST(:ids AS uuid[])) ORDER BY dispute_id, seq"),
                {"ids": ids}).all()
    finally:
        engine.dispose()
    out: dict[str, list[tuple[int, str, str]]] = {}
    for did, seq, event, decision in rows:
        out.setdefault(did, []).append((int(seq), str(event), str(decision)))
    return out


def _details(url: str, event: str) -> list[dict[str, Any]]:
    engine = sa.create_engine(sa.engine.make_url(url).set(drivername="postgresql+psycopg"))
    try:
        with engine.connect() as conn:
            return [dict(r[0]) for r in conn.execute(sa.text(
                "SELECT details FROM escalation_audit WHERE event = :e"), {"e": event})]
    finally:
        engine.dispose()


def _recorded(res: subprocess.CompletedProcess[str]) -> int:
    """``recorded`` of the worker's ``worker.stopped`` log line."""
    for line in (res.stderr + res.stdout).splitlines():
        if line.startswith("{") and '"worker.stopped"' in line:
            return int(json.loads(line)["recorded"])
    raise AssertionError(f"no worker.stopped line: {res.stderr}")


def _check(res: subprocess.CompletedProcess[str], name: str) -> dict[str, Any]:
    checks = {c["name"]: c for c in json.loads(res.stdout)}
    return dict(checks[name])


def test_restored_database_is_refused_then_reset_and_every_escalation_decided_once(
    cli_env: dict[str, str], two_dbs: tuple[str, str], redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    url_a, url_b = two_dbs
    env_a = dict(cli_env, ESCALATION_DATABASE_URL=url_a)
    env_b = dict(cli_env, ESCALATION_DATABASE_URL=url_b)
    res = run_cli(env_a, "db", "upgrade")
    assert res.returncode == 0, res.stderr
    due = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    ids = [str(uuid.uuid4()) for _ in range(4)]
    for did in ids:
        res = run_cli(env_a, "enqueue", "--dispute-id", did, "--source-hash", GOOD_HASH,
                      "--due-at", due)
        assert res.returncode == 0, res.stderr

    # the earlier point: every escalation pending in standard, seq 1
    dump = tmp_path / "a.dump"
    subprocess.run(["pg_dump", "-Fc", "-f", str(dump), _libpq(url_a)], check=True)
    res = run_cli(env_a, "worker", "--burst")
    assert res.returncode == 0 and _recorded(res) == 4, res.stderr
    assert all([e for _, e, _ in rows] == ["ENQUEUED", "PROMOTED"]
               for rows in _ledger(url_a, ids).values())
    # ... then the database goes back in time: restored into a new database
    subprocess.run(["pg_restore", "--no-owner", "-d", _libpq(url_b), str(dump)], check=True)

    # binding: refused without the override, by `db upgrade` and by every command
    for args in (["db", "upgrade"], ["status"]):
        res = run_cli(env_b, *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert "belongs to another database" in res.stderr, res.stderr
        assert "escalation db upgrade --restored" in res.stderr, res.stderr
    res = run_cli(env_b, "db", "upgrade", "--restored")
    assert res.returncode == 0, res.stderr
    assert "marked for a resync" in res.stderr, res.stderr

    # doctor fails REDIS_AHEAD (the mark, and the 4 payloads ahead of the ledger)
    res = run_cli(env_b, "doctor", "--json")
    assert res.returncode == 1, res.stdout
    ahead = _check(res, "REDIS_AHEAD")
    assert ahead["status"] == "FAIL" and "4 scheduled member(s) ahead" in ahead["detail"]
    assert "escalation reconcile" in ahead["advice"]

    # the worker refuses to fire the namespace, in one line, and records nothing
    res = run_cli(env_b, "worker", "--burst")
    assert res.returncode == 1, res.stderr
    assert "marked for a resync" in res.stderr and "escalation reconcile" in res.stderr
    assert "Traceback" not in res.stderr
    assert all(len(rows) == 1 for rows in _ledger(url_b, ids).values())

    # reconcile resets Redis to the ledger and names the lost decisions
    res = run_cli(env_b, "reconcile")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["lost_decisions"] == 4 and report["resync_cleared"] is True, report
    assert report["differences"].get("AHEAD") == 4 and report["repaired"] >= 4, report
    assert {e["dispute_id"] for e in report["lost_decision_entries"]} == set(ids)
    assert {e["match_decision"] for e in report["lost_decision_entries"]} == {
        "PROMOTED_TO_SENIOR"}
    resets = _details(url_b, "SCHEDULE_RESET")
    assert len(resets) == 4
    assert all(d["recovery"] == "redis_ahead_of_ledger" and d["notified"] is True
               and d["lost_decision"]["seq"] == "2" and d["lost_decision"]["entry_id"]
               for d in resets), resets
    res = run_cli(env_b, "doctor", "--json")
    assert _check(res, "REDIS_AHEAD")["status"] == "ok", res.stdout

    # every escalation decided on record, exactly once, after its SCHEDULE_RESET row
    res = run_cli(env_b, "worker", "--burst")
    assert res.returncode == 0 and _recorded(res) == 4, res.stderr
    ledger = _ledger(url_b, ids)
    assert set(ledger) == set(ids)
    for rows in ledger.values():
        assert [(s, e) for s, e, _ in rows] == [
            (1, "ENQUEUED"), (2, "SCHEDULE_RESET"), (3, "PROMOTED")], rows
    res = run_cli(env_b, "worker", "--burst")  # nothing left: nothing decided twice
    assert res.returncode == 0 and _recorded(res) == 0, res.stderr


def test_a_new_database_under_a_used_namespace_is_refused_and_its_lost_decisions_listed(
    cli_env: dict[str, str], two_dbs: tuple[str, str], redis_client: redis.Redis,
) -> None:
    url_a, url_new = two_dbs
    env_a = dict(cli_env, ESCALATION_DATABASE_URL=url_a)
    env_new = dict(cli_env, ESCALATION_DATABASE_URL=url_new)
    assert run_cli(env_a, "db", "upgrade").returncode == 0
    due = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    ids = [str(uuid.uuid4()) for _ in range(2)]
    for did in ids:
        res = run_cli(env_a, "enqueue", "--dispute-id", did, "--source-hash", GOOD_HASH,
                      "--due-at", due)
        assert res.returncode == 0, res.stderr
    res = run_cli(env_a, "worker", "--burst")
    assert res.returncode == 0 and _recorded(res) == 2, res.stderr

    # a new, empty database: refused; bound on purpose, then reconcile lists what Redis
    # notified for disputes this ledger has never heard of
    res = run_cli(env_new, "db", "upgrade")
    assert res.returncode == 2 and "belongs to another database" in res.stderr, res.stderr
    assert "none (a new or never-stamped database)" in res.stderr
    assert run_cli(env_new, "db", "upgrade", "--restored").returncode == 0
    res = run_cli(env_new, "reconcile")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["differences"].get("UNKNOWN_MEMBER") == 2, report
    lost = report["lost_decision_entries"]
    assert {e["dispute_id"] for e in lost} == set(ids)
    assert all(e["unknown_to_ledger"] == "true" and e["seq"] == "2" for e in lost), lost
    assert report["resync_cleared"] is True


def _tables(url: str) -> list[str]:
    """The tables of ``url``'s public schema."""
    engine = sa.create_engine(sa.engine.make_url(url).set(drivername="postgresql+psycopg"))
    try:
        return sorted(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_a_refused_db_upgrade_writes_nothing_and_an_unbound_database_serves_no_command(
    cli_env: dict[str, str], two_dbs: tuple[str, str], redis_client: redis.Redis,
) -> None:
    from escalation.adapters.db import upgrade_to_head

    url_a, url_new = two_dbs
    env_a = dict(cli_env, ESCALATION_DATABASE_URL=url_a)
    env_new = dict(cli_env, ESCALATION_DATABASE_URL=url_new)
    assert run_cli(env_a, "db", "upgrade").returncode == 0
    due = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    mine = str(uuid.uuid4())
    res = run_cli(env_a, "enqueue", "--dispute-id", mine, "--source-hash", GOOD_HASH,
                  "--due-at", due)
    assert res.returncode == 0, res.stderr

    # exit 2 = nothing written: the new database gets no migration, no binding
    res = run_cli(env_new, "db", "upgrade")
    assert res.returncode == 2 and "belongs to another database" in res.stderr, res.stderr
    assert "escalation db upgrade --restored" in res.stderr, res.stderr
    assert _tables(url_new) == []

    # a database at head but never bound (migrated by other means) serves no command while
    # the namespace's Redis records another database
    upgrade_to_head(url_new)
    theirs = str(uuid.uuid4())
    for args in (["enqueue", "--dispute-id", theirs, "--source-hash", GOOD_HASH,
                  "--due-in", "1s"], ["status"], ["reconcile"], ["worker", "--burst"]):
        res = run_cli(env_new, *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert "belongs to another database" in res.stderr, (args, res.stderr)
        assert "none (a new or never-stamped database)" in res.stderr, (args, res.stderr)
        assert "escalation db upgrade --restored" in res.stderr, (args, res.stderr)

    # the namespace's Redis holds only its own database's escalation: the worker claims and
    # decides exactly that one (an enqueue through the new database would be claimed too,
    # and lost: unknown to this ledger)
    res = run_cli(env_a, "worker", "--burst")
    assert res.returncode == 0 and _recorded(res) == 1, res.stderr
    stopped = [json.loads(line) for line in (res.stderr + res.stdout).splitlines()
               if line.startswith("{") and '"worker.stopped"' in line]
    assert stopped and stopped[0]["claimed"] == 1, stopped
    assert [e for _, e, _ in _ledger(url_a, [mine])[mine]] == ["ENQUEUED", "PROMOTED"]
