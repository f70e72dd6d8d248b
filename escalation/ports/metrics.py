"""The operational-figures ports: the ledger's ``/metrics`` figures and the namespace's
counters in Redis, with the values that cross them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

LAG_BUCKETS_S: tuple[float, ...] = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
"""Upper bounds (seconds) of the firing-lag histogram buckets (plus +Inf): the API's
``/metrics`` (from the ledger) and a worker's own metrics (``worker --metrics-port``)."""


@dataclass
class DecisionFigures:
    """Counts of PROMOTED/TERMINAL ledger rows by ``match_decision``, and the cumulative
    histogram of ``decided_at - due_at`` in seconds (bucket upper bound -> count)."""

    by_kind: dict[str, int] = field(default_factory=dict)
    lag_buckets: dict[float, int] = field(default_factory=dict)
    lag_count: int = 0
    lag_sum_s: float = 0.0


class MetricsFigures(Protocol):
    """The ledger's figures of ``/metrics``, read at scrape time (every API worker answers
    the same)."""

    def pending_by_ladder_tier(self) -> list[tuple[str, str, int]]:
        """(ladder, tier, pending escalations), from the projection."""
        ...

    def decisions(self) -> DecisionFigures:
        """Decision counts by kind and the due -> decided lag histogram, monotonic across
        retention (the figures of removed partitions included)."""
        ...

    def deadlines_due_within(self, hours: int) -> dict[str, int]:
        """Regulatory deadlines of open escalations in the next ``hours`` hours, by name."""
        ...


class StatsCounter(Protocol):
    """The namespace's operational counters that ``/metrics`` reports from Redis (e.g. the
    claims of a member whose lease had expired)."""

    def add(self, name: str, amount: int) -> None:
        """Add ``amount`` to the counter ``name``."""
        ...
