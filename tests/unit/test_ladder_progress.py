"""`ladder plan`/`apply` progress: a rich bar on a terminal, one summary line otherwise."""

from __future__ import annotations

import io
import sys
from typing import Any

import pytest
from rich.console import Console

from escalation.entrypoints import cli_ladder


def test_a_terminal_gets_a_rich_progress_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(cli_ladder, "err", Console(file=buf, force_terminal=True, width=100))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    bar = cli_ladder._progress("migrating")
    with bar as tick:
        tick(250, 1000)
        task: Any = bar._bar.tasks[0]
        assert (task.completed, task.total) == (250, 1000)
        tick(1000, 1000)
    assert "migrating" in buf.getvalue() and "1000/1000" in buf.getvalue()


def test_without_a_terminal_one_summary_line(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(cli_ladder, "err", Console(file=buf, force_terminal=False, width=200))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    with cli_ladder._progress("planning") as tick:
        for done in range(500, 3001, 500):
            tick(done, 3000)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("planning: 3000/3000 escalation(s) in ")
