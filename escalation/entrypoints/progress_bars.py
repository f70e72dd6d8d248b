"""Terminal progress for long commands: a rich progress bar on a terminal, nothing otherwise.

Usage in a command::

    with cli_progress("import") as progress:
        result = use_case(..., progress=progress)
    out.print("summary line")

On a terminal (stderr is a TTY) each phase gets a bar with its count, rate and elapsed time;
piped or redirected output gets no progress at all, only the command's summary line.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from escalation.service_layer.progress_report import Progress as ProgressFn
from escalation.service_layer.progress_report import no_progress


class _RichProgress:
    """A :class:`escalation.service_layer.progress_report.Progress` drawing one bar per phase."""

    def __init__(self, bars: Progress, label: str) -> None:
        self._bars = bars
        self._label = label
        self._tasks: dict[str, TaskID] = {}

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        task = self._tasks.get(phase)
        if task is None:
            task = self._bars.add_task(f"{self._label}: {phase}", total=total)
            self._tasks[phase] = task
        self._bars.update(task, completed=done, total=total)


@contextmanager
def cli_progress(label: str, console: Console | None = None) -> Iterator[ProgressFn]:
    """A progress callback for a use case; draws only when ``console`` is a terminal.

    ``console`` defaults to stderr (so stdout stays clean for ``--json`` and pipes).
    """
    target = console or Console(stderr=True, emoji=False)
    if not target.is_terminal:
        yield no_progress
        return
    bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=target, transient=True)
    with bars:
        yield _RichProgress(bars, label)
