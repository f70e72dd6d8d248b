"""With ``--json``, a command that fails prints nothing on stdout (a script's ``$(...)`` is
empty, never half a document) and one ``error: ...`` line on stderr, with a nonzero exit
(docs/cli.md, ADR 0019)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from tests.helpers import run_cli
from tests.integration.ladder_support import MigEnv


def _one_error_line(res: Any, code: int) -> None:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert res.stdout == "", res.stdout
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr


def test_an_invalid_ladder_file_with_json_is_one_stderr_line_and_no_stdout(
        cli_env: dict[str, str], tmp_path: Path, app: Any) -> None:
    mig = MigEnv.make(app, tmp_path)
    bad = mig.add("removed_unmapped", release=False)
    env = {**cli_env, "ESCALATION_LADDERS_DIR": str(mig.dir)}
    for args in (("plan", "--ladder", mig.name, "--to", "2", "--json"),
                 ("apply", "--ladder", mig.name, "--to", "2", "--plan-hash", "0" * 64,
                  "--reason", "x", "--json")):
        res = run_cli(env, "ladder", *args)
        _one_error_line(res, 2)
        assert bad.name in res.stderr and "tier_map" in res.stderr
    # a check's output is its report: printed, ok false, with the nonzero exit
    check = run_cli(env, "ladder", "check", "--json")
    assert check.returncode == 2
    assert json.loads(check.stdout)["ok"] is False


def test_a_failed_json_command_prints_nothing_on_stdout(cli_env: dict[str, str]) -> None:
    missing = str(uuid.uuid4())
    for args, code in ((("audit", "show", missing, "--json"), 3),
                       (("cancel", missing, "--json"), 3),
                       (("report", "sla", "--from", "2026-02-01T00:00:00Z", "--to",
                         "2026-01-01T00:00:00Z", "--json"), 2),
                       (("enqueue", "--dispute-id", missing, "--source-hash", "ab",
                         "--due-in", "-5h", "--json"), 2)):
        _one_error_line(run_cli(cli_env, *args), code)
