"""Ladder files that are wrong on disk are reported by `doctor` (LADDER_FILES) and `ladder
check`, naming the file or ladder: an invalid unreleased file (workers keep using the released
version), an empty directory, an edited file of an applied version, a released ladder whose
files all left the directory."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

from tests.helpers import run_cli

LADDERS = Path(__file__).resolve().parents[2] / "ladders"
HASH = "ef" * 32


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
                      "--ladder", "dispute_review", "--due-at", "2030-01-01T00:00:00+00:00")
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
