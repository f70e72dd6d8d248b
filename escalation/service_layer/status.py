"""Use case: ``escalation status`` -- what is pending, due, overdue, locked and dead."""

from __future__ import annotations

from typing import Any, Protocol


class _Stats(Protocol):
    def stats(self) -> dict[str, Any]: ...


class _Counts(Protocol):
    def counts(self) -> dict[str, Any]: ...


def status(*, scheduler: _Stats, store: _Counts) -> dict[str, Any]:
    """Merge Redis figures (pending, due_now, oldest_overdue_ms, locked, dead, counters) with
    PostgreSQL figures (escalations per status and pending per tier).

    Returns: ``{"redis": {...}, "postgres": {...}}``.
    """
    return {"redis": scheduler.stats(), "postgres": store.counts()}
