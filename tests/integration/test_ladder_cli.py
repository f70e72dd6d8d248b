"""``escalation ladder check|plan|apply|history`` as a subprocess (docs/ladder-migrations.md)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers import run_cli
from tests.integration.ladder_support import MigEnv, hours


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(env, "ladder", *args)


def _log_records(stderr: str) -> tuple[list[dict[str, Any]], list[str]]:
    """stderr split into its JSON log records and every other line (progress, errors)."""
    records: list[dict[str, Any]] = []
    other: list[str] = []
    for line in stderr.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if isinstance(rec, dict) and "event" in rec and "logger" in rec:
            records.append(rec)
        else:
            other.append(line)
    return records, other


def test_check_names_file_and_field_and_exits_2(cli_env: dict[str, str], tmp_path: Path,
                                                app: Any) -> None:
    mig = MigEnv.make(app, tmp_path)
    bad = mig.add("removed_unmapped", release=False)
    res = _cli(cli_env, "check", "--dir", str(mig.dir))
    assert res.returncode == 2
    assert f"{bad}: tier_map: tier 'senior'" in res.stderr


def test_check_without_database_checks_files_only_and_says_so(tmp_path: Path) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env["ESCALATION_HOME"] = str(tmp_path / "home")  # nothing running there
    res = _cli(env, "check")
    assert res.returncode == 0, res.stderr
    assert "checked the files only" in res.stderr
    assert not (tmp_path / "home" / "pg").exists()  # no embedded server was started


def test_release_plan_apply_history_round_trip(cli_env: dict[str, str], tmp_path: Path,
                                               app: Any) -> None:
    mig = MigEnv.make(app, tmp_path)
    ids = mig.enqueue("standard", due_at=app.scheduler.time() + hours(2), n=3)
    mig.add("inserted", release=False)
    env = {**cli_env, "ESCALATION_LADDERS_DIR": str(mig.dir)}
    unreleased = _cli(env, "plan", "--ladder", mig.name, "--to", "2")
    # a version nobody released is the caller's mistake: exit 2, nothing planned
    assert unreleased.returncode == 2 and "version 2 is not released" in unreleased.stderr
    for cmd in (("plan",), ("apply", "--plan-hash", "0" * 64)):
        # a version that does not exist: exit 3 (docs/cli.md), nothing planned
        missing = _cli(env, *cmd, "--ladder", mig.name, "--to", "9")
        assert missing.returncode == 3 and "version 9 has no file" in missing.stderr
        # a ladder that does not exist: exit 3 too; a malformed name: exit 2
        unknown = _cli(env, *cmd, "--ladder", "no_such_ladder", "--to", "2")
        assert unknown.returncode == 3, unknown.stderr
        assert "unknown ladder 'no_such_ladder' (ladders: " in unknown.stderr
        assert mig.name in unknown.stderr
        malformed = _cli(env, *cmd, "--ladder", "No Such!", "--to", "2")
        assert malformed.returncode == 2, malformed.stderr
        assert "'No Such!' is not a ladder name" in malformed.stderr
    missing = _cli(env, "release", "--ladder", mig.name, "--version", "9")
    assert missing.returncode == 3 and "no such ladder file" in missing.stderr, missing.stderr
    rel = _cli(env, "release", "--ladder", mig.name, "--version", "2", "--reason", "CHG-7")
    assert rel.returncode == 0, rel.stderr
    assert f"{mig.name}@2 released" in rel.stdout and "reason: CHG-7" in rel.stdout
    assert "@" in rel.stdout.split(" by ")[1]  # default actor: OS user@host
    plan = _cli(env, "plan", "--ladder", mig.name, "--to", "2", "--json")
    assert plan.returncode == 0, plan.stderr
    data = json.loads(plan.stdout)
    assert data["groups"] == [{"from": "standard", "to": "standard", "count": 3}]
    assert "plan" not in plan.stderr  # not a terminal: no progress output
    applied = _cli(env, "apply", "--ladder", mig.name, "--to", "2", "--plan-hash",
                   data["plan_hash"], "--actor", "carol@ops", "--reason", "CHG-7", "--json")
    assert applied.returncode == 0, applied.stderr
    out = json.loads(applied.stdout)
    assert (out["planned"], out["migrated"], out["replanned"], out["unchanged"]) == (3, 3, 0, 0)
    # not a terminal: no progress output, just the summary; stderr carries log records only
    # (ADR 0019), among them the run's ladder.apply_ended line naming its ledger event
    records, other = _log_records(applied.stderr)
    assert "migrat" not in "".join(other), other
    [ended] = [r for r in records if r["event"] == "ladder.apply_ended"]
    assert (ended["migrated"], ended["match_decision"]) == (3, "LADDER_APPLIED")
    assert all(mig.state(d).ladder_version == 2 for d in ids)
    assert all(mig.migrated_rows(d)[0]["actor"] == "carol@ops" for d in ids)
    same = _cli(env, "apply", "--ladder", mig.name, "--to", "2", "--plan-hash",
                data["plan_hash"])
    assert same.returncode == 0, same.stderr
    assert f"version 2 of {mig.name} is already applied (on " in same.stdout
    assert "by carol@ops); nothing to do" in same.stdout
    again = _cli(env, "apply", "--ladder", mig.name, "--to", "2", "--plan-hash", "0" * 64)
    assert again.returncode == 2 and f"unknown plan hash '{'0' * 64}'" in again.stderr
    assert data["plan_hash"][:16] not in again.stderr  # the expected hash is not handed out
    hist = json.loads(_cli(env, "history", "--ladder", mig.name, "--json").stdout)
    [run] = hist["runs"]
    assert run["status"] == "done" and run["migrated"] == 3
    assert (run["applied_by"], run["reason"]) == ("carol@ops", "CHG-7")
    assert [(r["version"], r["reason"]) for r in hist["releases"]] == [
        (1, "first use: every version that passes `ladder check` released as baseline"),
        (2, "CHG-7")]
    nope = _cli(env, "history", "--ladder", "no_such_ladder")
    assert nope.returncode == 3 and "unknown ladder 'no_such_ladder'" in nope.stderr
    assert nope.stdout == ""


def test_a_window_longer_than_a_century_is_named_listed_and_refused(
    cli_env: dict[str, str], tmp_path: Path, app: Any
) -> None:
    mig = MigEnv.make(app, tmp_path)
    v2 = mig.add("inserted", release=False)
    huge = "99999999999999999999"
    v2.write_text(v2.read_text().replace('amount = 12, unit = "calendar_hours"',
                                         f'amount = {huge}, unit = "calendar_hours"'))
    other = mig.dir / f"{mig.name}x.v1.toml"  # a second bad file: both are listed
    other.write_text((mig.dir / f"{mig.name}.v1.toml").read_text()
                     .replace(f'ladder = "{mig.name}"', f'ladder = "{mig.name}x"')
                     .replace("rank = 20", "rank = 5"))
    window = (f"{v2}: tiers[1].window.amount: SLA window amount {huge} calendar_hours is "
              "longer than about 100 years (at most 878400)")
    res = _cli(cli_env, "check", "--dir", str(mig.dir))
    assert res.returncode == 2, res.stderr
    assert f"error: {window}\n" in res.stderr
    assert f"error: {other}: tiers[1].rank: ranks must be strictly increasing" in res.stderr
    assert "2 problem(s) in 3 ladder file(s)" in res.stderr
    env = {**cli_env, "ESCALATION_LADDERS_DIR": str(mig.dir)}
    rel = _cli(env, "release", "--ladder", mig.name, "--version", "2", "--reason", "CHG-8")
    assert rel.returncode == 2 and window in rel.stderr, rel.stderr
    plan = _cli(env, "plan", "--ladder", mig.name, "--to", "2")
    assert plan.returncode == 2 and f"version 2 is invalid ({window}" in plan.stderr, plan.stderr
    assert "Traceback" not in rel.stderr + plan.stderr
    # the other commands still start: the invalid file is only not live
    status = run_cli(env, "status")
    assert status.returncode == 0, status.stderr


ACME_CALENDARS = """
[[calendars]]
id = "acme"
tz = "Europe/Berlin"
working_days = ["mon", "tue", "wed", "thu", "fri"]
hours = { open = "09:00", close = "17:00" }
holidays = [2025-11-27, 2025-11-28]
"""

ACME_LADDER = """
ladder = "acme_review"
version = 1
terminal_tier = "final"
description = "Counts in the deployment's own calendar (calendars file)."

[institution]
timezone = "Europe/Berlin"
calendar = "acme"

[[tiers]]
id = "first"
name = "First review"
rank = 10
window = { amount = 1, unit = "business_days", calendar = "acme" }

[[tiers]]
id = "final"
name = "Final review"
rank = 20
window = { amount = 2, unit = "business_days", calendar = "institution" }
"""


def test_a_ladder_may_count_in_a_calendar_of_the_deployments_calendars_file(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    import shutil
    import uuid

    ladders = tmp_path / "ladders"
    shutil.copytree(Path(__file__).resolve().parents[2] / "ladders", ladders)
    (ladders / "acme_review.v1.toml").write_text(ACME_LADDER)
    cal_file = tmp_path / "calendars.toml"
    cal_file.write_text(ACME_CALENDARS)
    env = {**cli_env, "ESCALATION_LADDERS_DIR": str(ladders)}
    without = _cli(env, "check")
    assert without.returncode == 2
    assert "acme_review.v1.toml: tiers[0].window.calendar: unknown calendar 'acme'" in \
        without.stderr
    assert "acme_review.v1.toml: institution.calendar: unknown calendar 'acme'" in without.stderr
    env["ESCALATION_CALENDARS_FILE"] = str(cal_file)
    ok = _cli(env, "check")
    assert ok.returncode == 0, ok.stderr
    # first use releases it as baseline; the window counts in acme: 1 business day after
    # Wednesday 26 Nov 2025 is Monday 1 Dec (the 27th and 28th are acme holidays, then the
    # weekend), due at its close, 17:00 Berlin
    did = str(uuid.uuid4())
    res = run_cli(env, "enqueue", "--dispute-id", did, "--source-hash", "ab" * 32,
                  "--ladder", "acme_review", "--opened-at", "2025-11-26T10:00:00+01:00",
                  "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["ladder"] == "acme_review@1" and got["tier"] == "first"
    assert got["due_at"] == "2025-12-01T16:00:00+00:00"
    assert got["institution"] == {"timezone": "Europe/Berlin", "calendar": "acme"}
    doctor = run_cli(env, "doctor", "--json")  # doctor checks with the same calendars
    [files] = [c for c in json.loads(doctor.stdout) if c["name"] == "LADDER_FILES"]
    assert files["ok"] is True, files


def test_escalation_operator_is_the_actor_of_enqueue_pause_resume_release_and_apply(
    cli_env: dict[str, str], tmp_path: Path, app: Any
) -> None:
    """ESCALATION_OPERATOR names who acts when a command has no --actor (enqueue, pause,
    resume) or is given none (ladder release / apply); without it enqueue records ``cli``
    (the round trip above: --actor wins, release without either records user@host)."""
    import uuid

    mig = MigEnv.make(app, tmp_path)
    mig.add("inserted", release=False)
    env = {**cli_env, "ESCALATION_LADDERS_DIR": str(mig.dir)}
    dana = {**env, "ESCALATION_OPERATOR": "dana"}
    did, anon = str(uuid.uuid4()), str(uuid.uuid4())
    due = (app.scheduler.time() + hours(2)).isoformat()
    for who, d in ((dana, did), (env, anon)):
        res = run_cli(who, "enqueue", "--dispute-id", d, "--ladder", mig.name, "--due-at", due,
                      "--source-hash", "ab12")
        assert res.returncode == 0, res.stderr
    for cmd in (("pause", did), ("resume", did)):
        res = run_cli(dana, *cmd)
        assert res.returncode == 0, res.stderr
    trail = app.store.trail(uuid.UUID(did))
    assert [(r.event, r.actor) for r in trail] == [
        ("ENQUEUED", "dana"), ("PAUSED", "dana"), ("RESUMED", "dana")]
    assert app.store.trail(uuid.UUID(anon))[0].actor == "cli"  # no human known

    rel = _cli(dana, "release", "--ladder", mig.name, "--version", "2", "--reason", "CHG-9")
    assert rel.returncode == 0, rel.stderr
    # the release line, then where its ledger event is ("on the ledger: ...")
    assert rel.stdout.splitlines()[0].endswith("by dana, reason: CHG-9)"), rel.stdout
    assert rel.stdout.splitlines()[1].startswith("on the ledger: LADDER_RELEASED"), rel.stdout
    plan = json.loads(_cli(env, "plan", "--ladder", mig.name, "--to", "2", "--json").stdout)
    applied = _cli(dana, "apply", "--ladder", mig.name, "--to", "2", "--plan-hash",
                   plan["plan_hash"], "--reason", "CHG-9", "--json")
    assert applied.returncode == 0, applied.stderr
    assert mig.migrated_rows(uuid.UUID(did))[0]["actor"] == "dana"
    hist = json.loads(_cli(env, "history", "--ladder", mig.name, "--json").stdout)
    assert hist["runs"][0]["applied_by"] == "dana"
    assert hist["releases"][-1]["released_by"] == "dana"
