"""`ladder plan`/`apply` progress: the use cases report through the one progress callback
(``service_layer.progress_report.Progress``), drawn as a rich bar on a terminal only."""

from __future__ import annotations

import inspect
import io

from rich.console import Console

from escalation.entrypoints.progress_bars import cli_progress
from escalation.service_layer import ladder_migration
from escalation.service_layer.progress_report import Progress, no_progress


def test_plan_and_apply_take_the_shared_progress_callback() -> None:
    annotation = inspect.signature(ladder_migration.plan_migration).parameters["progress"]
    assert "Progress" in str(annotation.annotation)
    hook = inspect.signature(ladder_migration.ApplyHooks).parameters["progress"]
    assert "Progress" in str(hook.annotation)
    assert ladder_migration.Progress is Progress


def test_a_terminal_gets_one_bar_per_phase() -> None:
    buf = io.StringIO()
    with cli_progress("ladder apply demo", console=Console(file=buf, force_terminal=True,
                                                          width=100)) as progress:
        progress("plan", 250, 1000)
        progress("migrate", 1000, 1000)
    text = buf.getvalue()
    assert "ladder apply demo: plan" in text and "ladder apply demo: migrate" in text
    assert "1000/1000" in text


def test_without_a_terminal_no_progress_output() -> None:
    buf = io.StringIO()
    with cli_progress("ladder plan demo", console=Console(file=buf,
                                                          force_terminal=False)) as progress:
        assert progress is no_progress
        progress("plan", 3000, 3000)
    assert buf.getvalue() == ""
