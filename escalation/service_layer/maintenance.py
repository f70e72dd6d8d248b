"""Recurring maintenance run exactly once across many workers (docs/reliability.md).

Two layers:

1. **Leader lease** (the ``Lease`` port; adapter ``adapters.leader_lease.LeaderLease``):
   ``SET leader <token> NX PX ttl``; the holder renews
   it with ``GETEX leader PX ttl`` (renewed when the token read back is its own: one command)
   and releases it with compare-and-delete.
   The holder acts only while ``monotonic() < last successful acquire/renew start +
   ttl * (1 - margin)``: a leader that fails to renew (Redis down, process paused) stops acting
   *before* its lease can expire and another worker takes over. Every poll is one Redis command.
2. **Per-occurrence compare-and-set in PostgreSQL** (the ``MaintenanceRuns`` port; adapter
   ``adapters.maintenance_runs``, table ``maintenance_runs``, Alembic 0005): a
   job's occurrence is ``floor(now / interval) * interval`` (``now`` = Redis ``TIME``, epoch
   ms). Claiming it locks the job's row and advances ``last_occurrence`` only if it is older,
   so even two processes that both think they lead (a paused ex-leader) cannot run one
   occurrence twice. PostgreSQL, not Redis, remembers the last run, so a Redis restart does not
   forget it.

Catch-up policy after downtime: when the last recorded occurrence is several intervals old,
the job runs **once** for the current occurrence; the skipped slots are counted in
``missed`` (never replayed N times).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from escalation.domain.timeutil import from_ms
from escalation.ports import Lease, MaintenanceRuns

log = structlog.get_logger("escalation.maintenance")


@dataclass(frozen=True)
class Job:
    """A recurring job: ``fn()`` returns a JSON-ready dict of details; every ``interval_s``."""

    name: str
    interval_s: int
    fn: Callable[[], dict[str, Any]]


@dataclass
class Maintenance:
    """Runs the jobs when (and only while) this process holds the leader lease.

    ``poll()`` is cheap: one Redis command when not leader; when leader, the PostgreSQL
    occurrence check happens at most every ``check_every_s`` seconds.
    """

    runs: MaintenanceRuns
    lease: Lease
    jobs: list[Job]
    actor: str
    check_every_s: float = 10.0
    _next_check: float = field(default=0.0, init=False)

    def poll(self) -> list[str]:
        """Renew/acquire the lease; when leading and a check is due, :meth:`tick`."""
        if not self.lease.poll():
            return []
        now = self.lease.clock()
        if now < self._next_check:
            return []
        self._next_check = now + self.check_every_s
        return self.tick()

    def tick(self, now_ms: int | None = None, *, force: bool = False) -> list[str]:
        """Run each job whose current occurrence is unclaimed. Returns the names run.

        Args:
            now_ms: the time (epoch ms; default Redis TIME).
            force: run without holding the lease (the PostgreSQL claim still guards each
                occurrence: ``maintenance run`` from the CLI, tests).
        """
        ran: list[str] = []
        # one clock reading per tick (was one Redis TIME per job): every job's occurrence is
        # taken at the same instant; PostgreSQL's claim guards each occurrence either way
        t = now_ms if now_ms is not None else self.lease.now_ms()
        for job in self.jobs:
            if not force and not self.lease.is_leader():
                break  # lost the lease mid-way: stop acting
            claim = self.runs.claim(job.name, job.interval_s, t, self.actor)
            if claim is None:
                continue
            started = time.monotonic()
            try:
                details = job.fn()
                status = "ok"
            except Exception as exc:
                details, status = {"error": str(exc)[:300]}, "failed"
            details = {**details, "missed": claim.missed,
                       "duration_ms": round((time.monotonic() - started) * 1000)}
            self.runs.finish(job.name, status, details)
            log.info("maintenance.ran", job=job.name, status=status,
                     occurrence=from_ms(claim.occurrence_ms).isoformat(), **details)
            ran.append(job.name)
        return ran


def log_dead_letters(count: int) -> dict[str, Any]:
    """The dead-letter alert job's body: warn when ``count`` dead letters wait."""
    if count:
        log.warning("maintenance.dead_letters", count=count,
                    hint="inspect with `escalation dead list`")
    return {"dead": count}


def alert_dead_letter_cap(report: Any) -> dict[str, Any]:
    """The dead-letter cap job's log lines for a ``dead_letters.CapReport``: ERROR
    ``maintenance.dead_letters_over_cap`` (the alert) when over the cap, else the WARNING
    ``maintenance.dead_letters`` while any wait. Returns the report's summary."""
    summary: dict[str, Any] = report.as_dict()
    if report.over_cap:
        log.error("maintenance.dead_letters_over_cap", **summary,
                  hint="`escalation dead list`; undeliverable notifications over the cap were "
                       "purged (a PURGED ledger row each); dead-lettered escalations are kept")
    elif report.count:
        log_dead_letters(report.count)
    return summary


def poll_safely(maintenance: Maintenance) -> list[str]:
    """``maintenance.poll()`` for the worker loop: a failure is logged, never fatal."""
    try:
        return maintenance.poll()
    except Exception as exc:
        log.warning("maintenance.failed", error=str(exc)[:300])
        return []
