"""docs/cli.md is generated from the command tree and must stay in sync with it."""

from __future__ import annotations

from pathlib import Path

from escalation.entrypoints.cli_reference import render_reference

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_cli_reference_is_up_to_date() -> None:
    assert DOC.read_text() == render_reference(), (
        "docs/cli.md is stale: run `python -m escalation.entrypoints.cli_reference > docs/cli.md`"
    )


def test_every_issue_2_command_is_documented() -> None:
    text = DOC.read_text()
    for cmd in ("enqueue", "cancel", "status", "audit show", "db upgrade", "worker", "import",
                "demo", "services stop"):
        assert f"## `escalation {cmd}`" in text


def test_the_commands_that_stream_json_lines_are_named() -> None:
    head = DOC.read_text().split("\n## Exit codes")[0]
    assert "one\nJSON document on stdout, except the commands named in the next paragraph" in head
    streams = next(p for p in head.split("\n\n") if p.startswith("Commands whose `--json`"))
    for cmd in ("audit show", "audit search", "bench enqueue"):
        assert f"`escalation {cmd}`" in streams
    assert "`escalation report sla`" not in streams and "`escalation status`" not in streams
