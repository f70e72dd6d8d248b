"""The README's ``field`` helper (captures a field of a ``--json`` document): empty input,
what a failed command leaves on stdout, stops with a one-line message, not a traceback.

No server is needed; each test runs the helper in bash (and the Python it starts), which the
unit tier does not."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.e2e.test_readme_using_it import readme_field

README = Path(__file__).resolve().parents[2] / "README.md"


def _field(stdin: str, name: str = "plan_hash") -> subprocess.CompletedProcess[str]:
    helper = readme_field(README.read_text(encoding="utf-8"))
    return subprocess.run(["bash", "-c", f"{helper}\nfield {name}"], input=stdin,
                          capture_output=True, text=True, timeout=60, check=False)


def test_field_prints_the_named_member() -> None:
    res = _field('{"plan_hash": "ab12", "groups": []}\n')
    assert res.returncode == 0 and res.stdout == "ab12\n", res


def test_field_on_empty_input_fails_with_a_clear_message() -> None:
    res = _field("")
    assert res.returncode == 1, res
    assert res.stdout == ""
    assert "Traceback" not in res.stderr
    assert res.stderr.strip() == "field plan_hash: no JSON on stdin (the command before | failed)"
