"""The maintenance ports: the leader lease and the per-occurrence run table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class OccurrenceClaim:
    """An occurrence of a recurring job claimed for running: its slot (epoch ms) and the
    slots skipped since the last run."""

    occurrence_ms: int
    missed: int


class Lease(Protocol):
    """A leader lease (adapter: ``adapters.leader_lease.LeaderLease``)."""

    ttl_ms: int
    margin: float
    clock: Callable[[], float]

    def poll(self) -> bool:
        """Renew when leading, else try to acquire. Returns :meth:`is_leader`."""
        ...

    def is_leader(self) -> bool:
        """True while the last acquire/renew succeeded recently enough."""
        ...

    def release(self) -> bool:
        """Give the lease up; True if this holder had it."""
        ...

    def now_ms(self) -> int:
        """The shared clock (Redis TIME), epoch milliseconds."""
        ...


class MaintenanceRuns(Protocol):
    """Per-occurrence compare-and-set of recurring jobs (adapter:
    ``adapters.maintenance_runs.PostgresMaintenanceRuns``)."""

    def claim(self, job: str, interval_s: int, now_ms: int, actor: str) -> OccurrenceClaim | None:
        """Claim the job's occurrence ``floor(now_ms / interval) * interval``; None when that
        occurrence (or a later one) was already claimed."""
        ...

    def finish(self, job: str, status: str, details: dict[str, Any]) -> None:
        """Record a claimed run's outcome (``ok`` / ``failed``) and its JSON details."""
        ...

    def rows(self) -> list[dict[str, Any]]:
        """Every job's last run, by job name."""
        ...
