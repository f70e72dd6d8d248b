"""The README's "Using it" block runs as written: the dispute it enqueues is on a ladder that
declares the action the next lines record, and every per-dispute command after it
(status, audit show, action record, pause, resume, resolve) exits 0, in order.

Commands that need files or long runs (import of ``complaints.csv``, a foreground worker,
ladder release/apply of a ``v2`` file, benchmarks) are not run here; ``createdb`` and
``db upgrade`` are the test database's fixture."""

from __future__ import annotations

import re
import shlex
import uuid
from pathlib import Path
from typing import Any

from tests.helpers import run_cli

README = Path(__file__).resolve().parents[2] / "README.md"
RUN = ("enqueue", "status", "audit show", "action record", "pause", "resume", "resolve")


def _commands() -> list[list[str]]:
    """The block's shell lines, continuations joined, comments dropped, split at ``;``."""
    text = README.read_text()
    block = re.search(r"## Using it\n\n```bash\n(.*?)```", text, re.S)
    assert block, "README: no bash block under '## Using it'"
    joined = block.group(1).replace("\\\n", " ")
    out: list[list[str]] = []
    for line in joined.splitlines():
        lex = shlex.shlex(line, posix=True, punctuation_chars=";")
        lex.whitespace_split = True
        words: list[str] = []
        for token in [*lex, ";"]:
            if token == ";":
                if words:
                    out.append(words)
                words = []
            else:
                words.append(token)
    return out


def test_the_readme_using_it_block_runs_in_order(app: Any, cli_env: dict[str, str]) -> None:
    env = dict(cli_env)
    names: dict[str, str] = {}
    ran: list[str] = []
    for line in _commands():
        if len(line) == 1 and "=" in line[0]:  # ID=...: a fresh id per run
            name, value = line[0].split("=", 1)
            assert uuid.UUID(value), line
            names[name] = str(uuid.uuid4())
            continue
        words = [re.sub(r"\$(\w+)", lambda m: names[m.group(1)], w) for w in line]
        if words[0] == "export":
            key, value = words[1].split("=", 1)
            if key not in ("ESCALATION_REDIS_URL", "ESCALATION_DATABASE_URL"):
                env[key] = value
            continue
        if words[0] != "escalation":
            continue
        command = " ".join(words[1:3]) if words[1] in ("audit", "action") else words[1]
        if command not in RUN or (command == "status" and len(words) > 2):
            continue
        res = run_cli(env, *words[1:])
        assert res.returncode == 0, (words, res.stderr[-2000:])
        ran.append(command)
    assert ran == ["enqueue", "status", "audit show", "action record", "pause", "resume",
                   "resolve"]
    did = uuid.UUID(names["ID"])
    trail = app.store.trail(did)
    assert trail[0].ladder == "reg_e_error_resolution"
    events = [r.event for r in trail]
    assert events == ["ENQUEUED", "ACTION_RECORDED", "PAUSED", "RESUMED", "RESOLVED"]
    recorded = trail[1]
    assert recorded.match_decision == "ACTION_PROVISIONAL_CREDIT"
    # the operator exported above the enqueue is the actor of every row
    assert {r.actor for r in trail} == {env["ESCALATION_OPERATOR"]}
