"""What a script may rely on from every ``escalation`` command (docs/cli.md): ``-h``,
shell completion, ``--json`` on every command that reports and the exit-code table, checked
in this process. ``--version`` and a start-up that imports no database, Redis, web or
calendar library are checked in fresh interpreters: tests/integration/test_cli_start_up.py.

The command tree is walked live, so a command added later is checked too: it either takes
``--json`` or is named in :data:`DOES_NOT_REPORT` with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer.main
from click.testing import CliRunner

from escalation.domain.errors import (
    ConflictError,
    EscalationError,
    InvalidInput,
    NotFound,
    SchemaNotAtHead,
)
from escalation.entrypoints.cli import OUTCOME_CODES, app
from escalation.entrypoints.cli_reference import EXIT_CODES

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"

# Commands that report nothing a script would parse. Every other command takes --json.
DOES_NOT_REPORT: dict[str, str] = {
    # runs the HTTP API until stopped; its state is read over HTTP (/readyz, /metrics)
    "serve": "a server",
    # a guided walkthrough for a person; the figures it shows come from `status --json` and
    # `audit show --json`, which a script calls itself
    "demo": "a walkthrough",
    # prints the PEM public key itself: the output is a key file, not a report
    "audit public-key": "prints a PEM file",
}


def _walk(cmd: Any, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    """Every runnable command under ``cmd``: leaves, and groups that run on their own
    (``invoke_without_command``, e.g. ``audit partitions``)."""
    subs = getattr(cmd, "commands", None)
    if subs is None:
        return [(path, cmd)]
    found = [(path, cmd)] if path and getattr(cmd, "invoke_without_command", False) else []
    for name in sorted(subs):
        found += _walk(subs[name], (*path, name))
    return found


#: the click command tree, built once: building it (typer.main.get_command) costs several
#: times what one ``-h`` costs, and typer's CliRunner would build it again for every call
TREE = typer.main.get_command(app)
COMMANDS = _walk(TREE, ())


def _groups(cmd: Any, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Every command group under ``cmd`` (``audit``, ``dead``, ``audit partitions``...)."""
    subs = getattr(cmd, "commands", None) or {}
    found = [path] if path and subs else []
    for name in sorted(subs):
        found += _groups(subs[name], (*path, name))
    return found


GROUPS = _groups(TREE, ())


def _opts(cmd: Any) -> set[str]:
    return {o for p in cmd.params for o in (*getattr(p, "opts", ()),
                                            *getattr(p, "secondary_opts", ()))}


def test_the_walk_sees_the_whole_tree() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    # a sample from each typer app that cli.py assembles: the walk reaches every one
    assert {"enqueue", "worker", "import", "notify", "pause", "serve", "services status",
            "db upgrade", "audit verify", "audit partitions", "report sla", "bench drain",
            "ladder check", "dead list", "maintenance status", "token create",
            "action record"} <= names
    assert len(names) >= 46


@pytest.mark.parametrize("path", [" ".join(p) for p, _ in COMMANDS])
def test_every_command_that_reports_takes_json(path: str) -> None:
    cmd = dict((" ".join(p), c) for p, c in COMMANDS)[path]
    if path in DOES_NOT_REPORT:
        assert "--json" not in _opts(cmd), f"{path} takes --json: drop it from DOES_NOT_REPORT"
        return
    assert "--json" in _opts(cmd), (
        f"`escalation {path}` reports but has no --json: add one (one JSON document on "
        f"stdout), or name it in DOES_NOT_REPORT with the reason")


def test_allow_list_names_only_commands_that_exist() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert set(DOES_NOT_REPORT) <= names


@pytest.mark.parametrize("path", sorted({" ".join(p) for p, _ in COMMANDS}
                                         | {" ".join(g) for g in GROUPS} | {""}))
def test_minus_h_is_help_everywhere(path: str) -> None:
    args = [*path.split(), "-h"]
    res = CliRunner().invoke(TREE, args, prog_name="escalation")
    assert res.exit_code == 0, (args, res.output)
    assert "Usage:" in res.output and "-h" in res.output


def test_shell_completion_is_switched_on() -> None:
    root = _opts(TREE)
    assert {"--install-completion", "--show-completion"} <= root


def test_not_found_exits_3_distinct_from_a_usage_error() -> None:
    assert NotFound.exit_code == 3
    assert InvalidInput.exit_code == ConflictError.exit_code == SchemaNotAtHead.exit_code == 2
    assert EscalationError.exit_code == 1


def test_every_exit_code_is_in_the_one_table_of_docs_cli_md() -> None:
    text = DOC.read_text()
    assert text.count("## Exit codes") == 1
    codes = {code for code, _ in EXIT_CODES}
    assert {0, 1, 2, 3, 130} <= codes
    for code in codes:
        assert f"\n| {code} | " in text
    # every exit code an error class carries is in the table
    classes: list[type[EscalationError]] = [EscalationError]
    seen: set[int] = set()
    while classes:
        cls = classes.pop()
        seen.add(cls.exit_code)
        classes += cls.__subclasses__()
    assert seen <= codes


def test_resolve_lists_every_outcome_code() -> None:
    from escalation.domain.obligations import Outcome

    assert set(OUTCOME_CODES) == {o.value for o in Outcome if o is not Outcome.UNSTATED}
    assert len(OUTCOME_CODES) == len(set(OUTCOME_CODES))
