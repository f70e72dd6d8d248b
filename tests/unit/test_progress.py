"""Progress for long commands: drawn on a terminal, silent otherwise."""

from __future__ import annotations

import io

from rich.console import Console

from escalation.entrypoints.progress_bars import cli_progress
from escalation.service_layer.progress_report import no_progress


def test_progress_is_drawn_on_a_terminal() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100)
    with cli_progress("import", console=console) as progress:
        assert progress is not no_progress
        progress("validate", 1000, None)
        progress("validate", 2000, 2000)
        progress("write", 2000, 2000)
    text = buf.getvalue()
    assert "import: validate" in text and "import: write" in text
    assert "2000/2000" in text


def test_no_progress_output_when_not_a_terminal() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False)
    with cli_progress("import", console=console) as progress:
        assert progress is no_progress
        progress("validate", 10, 10)
    assert buf.getvalue() == ""
