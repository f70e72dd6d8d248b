"""Generate docs/cli.md from the live command tree (``python -m
escalation.entrypoints.cli_reference > docs/cli.md``); a test keeps the file in sync."""

from __future__ import annotations

from typing import Any

import typer.main

from escalation.entrypoints.cli import app

HEADER = """# CLI reference

Generated from the command tree by `python -m escalation.entrypoints.cli_reference`
(tests/unit/test_cli_reference.py fails when this file is out of date).

Every command reads its configuration from `ESCALATION_*` environment variables
(see [operations](operations.md)); with no `ESCALATION_REDIS_URL` / `ESCALATION_DATABASE_URL`
it starts or reuses the embedded Valkey and PostgreSQL under `ESCALATION_HOME`.
A user mistake prints one `error: ...` line on stderr and exits 2 (3 when what it names
does not exist); an operational failure exits 1 (the table below). With `--json`, a command
that fails that way prints nothing on stdout, never part of a document: a script's
`$(... --json)` is empty, so check the exit status. A check whose JSON report is its output
(`ladder check`, `audit verify`, `audit verify-bundle`, `audit verify-digest`) prints that
report, `"ok": false`, with its nonzero exit, and so does `import` when rows are bad
(`"imported": false` and every bad row, docs/imports.md).

`-h` is `--help` on every command; `escalation --version` prints the installed version;
`escalation --install-completion` installs shell completion (bash, zsh, fish, PowerShell)
and `--show-completion` prints the script. Every command that reports takes `--json`: one
JSON document on stdout, except the commands named in the next paragraph, which stream
JSON lines. Every instant in that JSON is RFC 3339 with its `T`
(`2026-12-08T22:00:00+00:00`), and where the API answers for the same data the document has
the API's shape (`enqueue --json`'s `deadlines` is the API's list; `report sla --json` is
`GET /v1/reports/sla` plus its `deadlines`). Command output (tables, summaries, JSON) goes
to stdout; log records go to stderr (`ESCALATION_LOG_FORMAT`, `ESCALATION_LOG_LEVEL`),
never into the output ([ADR 0019](adr/0019-cli-contract.md)).
"""

# The one table of exit codes (docs/cli.md): what a script may rely on.
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (0, "Done; a check passed."),
    (1, "Operational failure: a server unreachable or out of memory, a check that failed "
        "(`audit verify`, `doctor`, `reconcile`), a `--burst` run that left something "
        "undecided or undelivered."),
    (2, "Usage error: unknown command or option, bad or missing input, a transition not "
        "allowed now (e.g. pause a paused dispute), a database not at the schema head or "
        "bound to another namespace. Nothing is written."),
    (3, "Not found: the dispute, dead letter, token, ladder or ladder version named does not "
        "exist (a malformed ladder name is a usage error, 2). Nothing is written."),
    (4, "The database is read-only (a hot standby, or a failover in progress; SQLSTATE "
        "25006): nothing is written; run the command again once a writable primary answers "
        "(docs/postgresql.md, \"Poolers, read-only databases and multi-host URLs\")."),
    (130, "Interrupted (Ctrl-C); `import` stopped by a signal exits 128 + its number."),
)

HEADER += "\n## Exit codes\n\n| Code | Meaning |\n| ---: | --- |\n" + "".join(
    f"| {code} | {meaning} |\n" for code, meaning in EXIT_CODES)


# typer vendors its own click (typer._click), so commands are inspected by duck typing.


def _walk(cmd: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    found = [(path, cmd)]
    if hasattr(cmd, "commands"):
        for name in sorted(cmd.commands):
            sub = cmd.commands[name]
            if not sub.hidden:
                found += _walk(sub, [*path, name])
    return found


def _param_line(param: Any) -> str:
    if param.param_type_name == "argument":
        text = (getattr(param, "help", None) or "").strip()
        return f"- `{(param.name or '').upper()}` (argument){': ' + text if text else ''}"
    names = ", ".join(f"`{o}`" for o in param.opts + param.secondary_opts)
    text = (param.help or "").strip()
    default = ""
    if param.default not in (None, False, ()) and not param.is_flag:
        default = f" (default: `{param.default}`)"
    required = " **(required)**" if getattr(param, "required", False) else ""
    return f"- {names}{required}: {text}{default}".rstrip(": ")


def _json_lines(commands: list[tuple[list[str], Any]]) -> list[str]:
    """The commands whose ``--json`` prints JSON lines rather than one document: those
    whose ``--json`` help says "JSON line" (read from the live tree, so the list in the
    header cannot go stale)."""
    found = []
    for path, cmd in commands:
        for p in getattr(cmd, "params", ()):
            if "--json" in getattr(p, "opts", ()) and "json line" in (p.help or "").lower():
                found.append(" ".join(path))
    return found


def streams_paragraph(commands: list[tuple[list[str], Any]]) -> str:
    """The header's paragraph naming the commands that stream JSON lines with ``--json``."""
    names = ", ".join(f"`{n}`" for n in _json_lines(commands))
    return ("\nCommands whose `--json` streams JSON lines (one JSON object per line, read "
            "line by line: `jq -c`, not one `json.load`): " + names + ". `audit show` and "
            "`audit search` print one ledger row (or, with `--deadlines`, one deadline) per "
            "line; the `bench` scenarios print one JSON line with every figure, then a "
            "`SUMMARY` line that is not JSON.\n")


def render_reference() -> str:
    """Markdown for every visible command: usage, help text and options."""
    root = typer.main.get_command(app)
    intro, heading, codes = HEADER.partition("\n## Exit codes")
    parts = [intro, streams_paragraph(_walk(root, ["escalation"])), heading, codes]
    for path, cmd in _walk(root, ["escalation"]):
        if len(path) == 1:
            continue
        title = " ".join(path)
        parts.append(f"\n## `{title}`\n")
        help_text = (cmd.help or "").strip()
        if help_text:
            parts.append(help_text.split("\f")[0].strip() + "\n")
        if hasattr(cmd, "commands"):
            subs = ", ".join(f"`{n}`" for n in sorted(cmd.commands)
                             if not cmd.commands[n].hidden)
            parts.append(f"\nSubcommands: {subs}\n")
            continue
        params = [p for p in cmd.params if p.name != "help"]
        if params:
            parts.append("\n" + "\n".join(_param_line(p) for p in params) + "\n")
    return "".join(parts)


if __name__ == "__main__":
    print(render_reference(), end="")
