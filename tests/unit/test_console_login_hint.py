"""The console's sign-in page tells a reviewer which command makes a token: it must be one
the CLI accepts (it once named a positional NAME the command does not take)."""

from __future__ import annotations

import re
import shlex
from typing import Any

import typer

from escalation.entrypoints.api.console import HERE
from escalation.entrypoints.cli import app


def test_the_sign_in_page_names_a_token_command_the_cli_accepts() -> None:
    html = (HERE / "templates" / "login.html").read_text()
    [code] = re.findall(r"<code>(escalation token create[^<]*)</code>", html)
    words = shlex.split(code)[3:]  # after "escalation token create"
    group: Any = typer.main.get_command(app)  # typer's own click classes
    create = group.commands["token"].commands["create"]
    ctx = create.make_context("create", [w.lower() if w.isupper() else w for w in words])
    assert ctx.params["name"] == "name" and ctx.params["role"] == "compliance"
