"""Progress reporting for long use cases (import, ladder plan/apply, reconcile, audit...).

A use case accepts an optional ``progress`` callable and calls it as it goes; the CLI passes
one that draws a rich progress bar on a terminal (``escalation.entrypoints.progress_bars``). The
service layer stays free of any terminal code.
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """``progress(phase, done, total)``: ``done`` units of ``phase`` finished so far.

    ``phase`` is a short lower-case label (``"validate"``, ``"write"``, ``"verify"``...);
    ``total`` is the number of units when known, else None. Calls are cheap and frequent
    (every few thousand units); the callable must not raise.
    """

    def __call__(self, phase: str, done: int, total: int | None) -> None: ...


def no_progress(phase: str, done: int, total: int | None) -> None:
    """The default :class:`Progress`: ignores every call."""
