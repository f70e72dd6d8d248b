"""Regressions found by a newcomer trying the product: each input is refused before anything
is written, or a command keeps working where it should."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_cli

LADDERS = Path(__file__).resolve().parents[2] / "ladders"
HASH = "ef" * 32


@pytest.mark.parametrize("due", ["0001-01-01T00:00:00+00:00", "9999-12-31T00:00:00+00:00",
                                 "1969-12-31T23:59:59+00:00"])
def test_out_of_range_dates_are_refused_before_anything_is_written(
    app: Any, cli_env: dict[str, str], due: str
) -> None:
    did = str(uuid.uuid4())
    res = run_cli(cli_env, "enqueue", "--dispute-id", did, "--source-hash", HASH,
                  "--due-at", due)
    assert res.returncode == 2, res.stderr
    assert "outside 1970-01-01" in res.stderr and "Traceback" not in res.stderr
    assert app.store.get(uuid.UUID(did)) is None
    assert app.scheduler.payload(uuid.UUID(did)) is None


@pytest.mark.parametrize("money", ["99999999999999999999999999999", "1e30", "١٢٣", "0.125",
                                   "1.001", "1e3", "1_000"])
def test_huge_or_non_ascii_money_is_a_clear_error(cli_env: dict[str, str], money: str) -> None:
    res = run_cli(cli_env, "enqueue", "--dispute-id", str(uuid.uuid4()), "--source-hash", HASH,
                  "--due-at", "2026-01-01T00:00:00+00:00", "--materiality", money)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "materiality" in res.stderr


def test_bad_server_urls_are_one_line_errors(cli_env: dict[str, str]) -> None:
    res = run_cli(dict(cli_env, ESCALATION_REDIS_URL="garbage"), "status")
    assert res.returncode == 2 and "ESCALATION_REDIS_URL" in res.stderr
    assert "Traceback" not in res.stderr
    base = cli_env["ESCALATION_DATABASE_URL"].rsplit("/", 1)[0]
    db = f"{base}/no_such_db_{uuid.uuid4().hex[:6]}"
    res = run_cli(dict(cli_env, ESCALATION_DATABASE_URL=db), "status")
    assert res.returncode == 1 and "cannot reach PostgreSQL" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_redis_db_index_the_server_lacks_is_a_config_error_not_a_traceback(
    cli_env: dict[str, str]
) -> None:
    url = cli_env["ESCALATION_REDIS_URL"]
    if not url.startswith("redis://"):
        pytest.skip("a DB index is a one-server URL setting")
    bad = url.rsplit("/", 1)[0] + "/99"  # redis-server has 16 databases by default
    for cmd in (("status",), ("doctor",)):
        res = run_cli(dict(cli_env, ESCALATION_REDIS_URL=bad), *cmd)
        assert res.returncode == 2, res.stdout + res.stderr
        assert "Traceback" not in res.stderr and "startup.retry" not in res.stderr
        assert "DB index is out of range" in res.stderr and "/99" in res.stderr


def test_one_invalid_unreleased_ladder_file_is_reported_and_changes_nothing_workers_do(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    ladders = tmp_path / "ladders"
    shutil.copytree(LADDERS, ladders)
    (ladders / "reg_z_billing_error.v2.toml").write_text("ladder = 'reg_z_billing_error'\n")
    env = dict(cli_env, ESCALATION_LADDERS_DIR=str(ladders))
    status = run_cli(env, "status", "--json")
    assert status.returncode == 0, status.stderr
    doctor = run_cli(env, "doctor")
    assert doctor.returncode == 1 and "LADDER_FILES" in doctor.stdout + doctor.stderr
    assert "reg_z_billing_error.v2.toml" in doctor.stdout + doctor.stderr
    # an invalid file is never released: workers and enqueue keep using the released v1
    worker = run_cli(env, "worker", "--burst")
    assert worker.returncode == 0 and "Traceback" not in worker.stderr, worker.stderr


@pytest.mark.slow
def test_embedded_database_is_migrated_by_any_command(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env["ESCALATION_HOME"] = str(tmp_path / "home")
    try:
        res = run_cli(env, "status", "--json")
        assert res.returncode == 0, res.stderr
        assert '"pending": 0' in res.stdout
    finally:
        run_cli(env, "services", "stop")


@pytest.mark.slow
def test_burst_worker_gives_up_when_redis_stays_unreachable(cli_env: dict[str, str]) -> None:
    res = run_cli(dict(cli_env, ESCALATION_REDIS_URL="redis://127.0.0.1:1/9"),
                  "worker", "--burst")
    assert res.returncode == 1, res.stderr[-500:]
    assert "cannot reach Redis" in res.stderr and "Traceback" not in res.stderr


def test_audit_show_accepts_an_external_id_and_cancel_twice_says_so(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    ext = f"C-{uuid.uuid4().hex[:8]}"
    csv_file = tmp_path / "c.csv"
    csv_file.write_text(f"id,opened\n{ext},2026-01-02\n")
    res = run_cli(cli_env, "import", str(csv_file), "--id-column", "id", "--opened-column",
                  "opened", "--external-source", "newcomer")
    assert res.returncode == 0, res.stderr
    shown = run_cli(cli_env, "audit", "show", ext, "--json")
    assert shown.returncode == 0, shown.stderr
    assert f'"external_id": "{ext}"' in shown.stdout
    missing = run_cli(cli_env, "audit", "show", "no-such-complaint")
    assert missing.returncode == 3 and "no dispute with id or external id" in missing.stderr
    from escalation.service_layer.importer import stable_dispute_id

    did = str(stable_dispute_id(ext, "newcomer")[0])
    first = run_cli(cli_env, "cancel", did)
    assert first.returncode == 0 and "cancelled" in first.stdout
    second = run_cli(cli_env, "cancel", did)
    assert second.returncode == 0 and "already cancelled" in second.stdout
    unknown = run_cli(cli_env, "cancel", str(uuid.uuid4()))
    assert unknown.returncode == 3 and "Traceback" not in unknown.stderr  # not found


def test_import_refuses_duplicate_ids_unknown_tables_and_unknown_ladders_once(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    csv_file = tmp_path / "d.csv"
    csv_file.write_text(f"id,opened,tier\n{a},2026-01-02,standard\n{b},2026-01-02,standard\n"
                        f"{a},2026-01-03,senior\n")
    base = ["import", str(csv_file), "--id-column", "id", "--opened-column", "opened"]
    res = run_cli(cli_env, *base)
    assert res.returncode == 2 and "already on line 2" in res.stderr
    assert app.store.get(a) is None and app.store.get(b) is None
    mapping = tmp_path / "m.toml"
    mapping.write_text('[colums]\ndispute_id = "id"\n')
    res = run_cli(cli_env, "import", str(csv_file), "--mapping", str(mapping))
    assert res.returncode == 2 and "unknown table" in res.stderr and "[colums]" in res.stderr
    res = run_cli(cli_env, *base, "--ladder", "no_such_ladder", "--skip-invalid")
    assert res.returncode == 2
    assert res.stderr.count("no_such_ladder") == 1, res.stderr
    res = run_cli(cli_env, *base, "--tier-column", "tier", "--tier", "standard",
                  "--skip-invalid")
    assert res.returncode == 0 and "2 enqueued" in res.stdout, res.stderr


def test_ladder_check_refuses_an_empty_directory(cli_env: dict[str, str], tmp_path: Path) -> None:
    res = run_cli(cli_env, "ladder", "check", "--dir", str(tmp_path))
    assert res.returncode == 2 and "no ladder files" in res.stderr


def test_doctor_flags_an_edited_file_of_an_applied_ladder_version(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    from datetime import UTC, datetime

    import sqlalchemy as sa

    name = f"doctor_{uuid.uuid4().hex[:8]}"
    ladders = tmp_path / "ladders"
    ladders.mkdir()
    text = (LADDERS / "dispute_review.v1.toml").read_text()
    (ladders / f"{name}.v1.toml").write_text(text.replace('"dispute_review"', f'"{name}"'))
    with app.engine.begin() as conn:  # as if v1 had been applied with other file content
        conn.execute(sa.text(
            "INSERT INTO ladder_history (ladder, version, checksum, plan_hash, applied_by, "
            "started_at, finished_at, status) VALUES (:l, 1, :c, 'x', 'test', :t, :t, 'done')"),
            {"l": name, "c": "0" * 64, "t": datetime.now(UTC)})
    res = run_cli(dict(cli_env, ESCALATION_LADDERS_DIR=str(ladders)), "doctor")
    assert res.returncode == 1
    assert "LADDER_FILES" in res.stdout and "checksum" in res.stdout, res.stdout


def test_bad_webhook_url_and_missing_report_directory_are_refused_up_front(
    cli_env: dict[str, str]
) -> None:
    res = run_cli(cli_env, "notify", "--burst", "--webhook-url", "not-a-url")
    assert res.returncode == 2 and "--webhook-url must be an http" in res.stderr
    res = run_cli(cli_env, "report", "sla", "--from", "2026-01-01T00:00:00Z", "--to",
                  "2026-02-01T00:00:00Z", "--format", "csv", "--out", "/nonexistent/dir/x.csv")
    assert res.returncode == 2 and "does not exist" in res.stderr


def test_a_released_ladder_whose_files_all_left_the_directory_is_reported(
    cli_env: dict[str, str], server_urls: tuple[str, str], tmp_path: Path
) -> None:
    # Moving every file of a released ladder away left `doctor` (LADDER_FILES) and `ladder
    # check` green while workers dead-lettered each escalation pinned to it. On a database
    # bound to this deployment (`db upgrade`), both now name the ladder and what is pinned.
    import json

    from tests.conftest import scratch_database

    ladders = tmp_path / "ladders"
    shutil.copytree(LADDERS, ladders)
    with scratch_database(server_urls[1], "escalation_gone") as url:
        env = {**cli_env, "ESCALATION_DATABASE_URL": url, "ESCALATION_LADDERS_DIR": str(ladders)}
        assert run_cli(env, "db", "upgrade").returncode == 0
        res = run_cli(env, "enqueue", "--dispute-id", str(uuid.uuid4()), "--source-hash", HASH,
                      "--ladder", "dispute_review", "--due-at", "2099-01-01T00:00:00+00:00")
        assert res.returncode == 0, res.stderr
        assert run_cli(env, "ladder", "check").returncode == 0
        away = tmp_path / "away"
        away.mkdir()
        for f in ladders.glob("dispute_review.v*.toml"):
            f.rename(away / f.name)
        check = run_cli(env, "ladder", "check")
        assert check.returncode == 2, check.stdout + check.stderr
        assert ("dispute_review: (files): released (v1) and 1 pending or paused "
                "escalation(s) are pinned to it, but no file of it") in check.stderr
        doctor = run_cli(env, "doctor", "--json")
        [files] = [c for c in json.loads(doctor.stdout) if c["name"] == "LADDER_FILES"]
        assert not files["ok"] and "dispute_review: (files)" in json.dumps(files)
        assert doctor.returncode == 1
        # a scratch directory given with --dir is not the deployment's: not reported there
        scratch_dir = tmp_path / "drafts"
        scratch_dir.mkdir()
        shutil.copy(LADDERS / "dispute_review.v1.toml", scratch_dir)
        assert run_cli(env, "ladder", "check", "--dir", str(scratch_dir)).returncode == 0
