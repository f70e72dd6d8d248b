"""Recurring maintenance run exactly once across many workers (issue 7 pt 4; seed 002 idea 06).

Two layers:

1. **Leader lease** (:class:`LeaderLease`): ``SET leader <token> NX PX ttl``; the holder renews
   it with ``leader_renew.lua`` (compare-and-pexpire) and releases it with compare-and-delete.
   The holder acts only while ``monotonic() < last successful acquire/renew start +
   ttl * (1 - margin)``: a leader that fails to renew (Redis down, process paused) stops acting
   *before* its lease can expire and another worker takes over. A non-leader spends one Redis
   command (the ``SET NX``) per poll.
2. **Per-occurrence compare-and-set in PostgreSQL** (``maintenance_runs``, Alembic 0005): a
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
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import redis
import sqlalchemy as sa
import structlog

from escalation.adapters.redis_keys import Keys
from escalation.adapters.redis_reliability import ReliabilityRedis
from escalation.domain.timeutil import from_ms

log = structlog.get_logger("escalation.maintenance")

LEADER_NAME = "maintenance"


class LeaderLease:
    """A leader lease on Redis (shard 0 of the namespace).

    Args:
        rel: reliability Redis access.
        ttl_ms: lease, milliseconds (>= 100).
        margin: fraction of the lease kept as safety (the leader stops acting after
            ``ttl * (1 - margin)`` without a successful renewal).
        token: unique token of this contender (default: random).
        clock: monotonic seconds (tests may inject one).
    """

    def __init__(self, rel: ReliabilityRedis, *, name: str = LEADER_NAME, ttl_ms: int = 30_000,
                 margin: float = 0.2, token: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rel, self.ttl_ms, self.margin, self.clock = rel, ttl_ms, margin, clock
        self.token = token or uuid.uuid4().hex
        self.key = Keys(rel.namespace, 0).leader(name)
        self._valid_until = 0.0

    def _grant(self, started: float) -> None:
        self._valid_until = started + self.ttl_ms / 1000.0 * (1.0 - self.margin)

    def is_leader(self) -> bool:
        """True while the last acquire/renew succeeded recently enough (see the class doc)."""
        return self.clock() < self._valid_until

    def poll(self) -> bool:
        """One Redis command: renew when leading, else try to acquire. Returns is_leader()."""
        started = self.clock()
        try:
            if self._valid_until > 0:
                ok = int(self.rel.run("leader_renew", [self.key], [self.token, self.ttl_ms])) == 1
            else:
                ok = bool(self.rel.client.set(self.key, self.token, nx=True, px=self.ttl_ms))
        except (redis.ConnectionError, redis.TimeoutError):
            return self.is_leader()  # no renewal: the grant runs out by itself
        if ok:
            self._grant(started)
        else:
            self._valid_until = 0.0
        return self.is_leader()

    def release(self) -> bool:
        """Compare-and-delete: True if this token held the lease."""
        self._valid_until = 0.0
        try:
            return int(self.rel.run("release_lock", [self.key], [self.token])) == 1
        except (redis.ConnectionError, redis.TimeoutError):
            return False


@dataclass(frozen=True)
class Job:
    """A recurring job: ``fn()`` returns a JSON-ready dict of details; every ``interval_s``."""

    name: str
    interval_s: int
    fn: Callable[[], dict[str, Any]]


@dataclass
class Claim:
    """An occurrence claimed for running: slot (epoch ms) and slots skipped since the last."""

    occurrence_ms: int
    missed: int


_T = sa.table("maintenance_runs", sa.column("job"), sa.column("last_occurrence"))


def claim_occurrence(engine: sa.Engine, job: Job, now_ms: int, actor: str) -> Claim | None:
    """Claim ``job``'s current occurrence in PostgreSQL (row lock + compare-and-set).

    Returns:
        the Claim, or None when this occurrence (or a later one) was already claimed.
    """
    interval_ms = job.interval_s * 1000
    occ = now_ms // interval_ms * interval_ms
    occ_dt = from_ms(occ)
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO maintenance_runs (job, last_occurrence, last_run_at, last_status, "
            "last_leader) VALUES (:job, 'epoch', clock_timestamp(), 'ok', :actor) "
            "ON CONFLICT (job) DO NOTHING"), {"job": job.name, "actor": actor})
        last: datetime = conn.execute(sa.text(
            "SELECT last_occurrence FROM maintenance_runs WHERE job = :job FOR UPDATE"),
            {"job": job.name}).scalar_one()
        if last >= occ_dt:
            return None
        last_ms = int(last.timestamp() * 1000)
        missed = 0 if last_ms <= 0 else max(0, (occ - last_ms) // interval_ms - 1)
        conn.execute(sa.text(
            "UPDATE maintenance_runs SET last_occurrence = :occ, last_run_at = clock_timestamp(),"
            " last_status = 'running', missed = missed + :missed, last_leader = :actor "
            "WHERE job = :job"), {"occ": occ_dt, "missed": missed, "actor": actor,
                                  "job": job.name})
    return Claim(occ, missed)


def finish_run(engine: sa.Engine, job: Job, status: str, details: dict[str, Any]) -> None:
    """Record the outcome of a claimed run (``ok`` or ``failed``) and its details."""
    import json

    with engine.begin() as conn:
        conn.execute(sa.text(
            "UPDATE maintenance_runs SET runs = runs + 1, last_status = :st, "
            "details = CAST(:d AS jsonb) WHERE job = :job"),
            {"st": status, "d": json.dumps(details, default=str), "job": job.name})


def runs(engine: sa.Engine) -> list[dict[str, Any]]:
    """Every job's row of ``maintenance_runs`` (for ``maintenance status``)."""
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT * FROM maintenance_runs ORDER BY job")).mappings()
        return [dict(r) for r in rows]


@dataclass
class Maintenance:
    """Runs the jobs when (and only while) this process holds the leader lease.

    ``poll()`` is cheap: one Redis command when not leader; when leader, the PostgreSQL
    occurrence check happens at most every ``check_every_s`` seconds.
    """

    engine: sa.Engine
    lease: LeaderLease
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
        for job in self.jobs:
            if not force and not self.lease.is_leader():
                break  # lost the lease mid-way: stop acting
            t = now_ms if now_ms is not None else self.lease.rel.now_ms()
            claim = claim_occurrence(self.engine, job, t, self.actor)
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
            finish_run(self.engine, job, status, details)
            log.info("maintenance.ran", job=job.name, status=status,
                     occurrence=from_ms(claim.occurrence_ms).isoformat(), **details)
            ran.append(job.name)
        return ran


def default_jobs(app: Any, rel: ReliabilityRedis) -> list[Job]:
    """reconcile (5 min), dead-letter alerts (1 min), partition upkeep (1 h, if available)."""
    from escalation.service_layer.reconcile import reconcile

    def do_reconcile() -> dict[str, Any]:
        rep = reconcile(scheduler=app.scheduler, store=app.store, redis_side=rel)
        return {"checked_db": rep.checked_db, "repaired": rep.count(repaired=True),
                "differences": rep.count()}

    def dead_alerts() -> dict[str, Any]:
        n = rel.dead_count()
        if n:
            log.warning("maintenance.dead_letters", count=n,
                        hint="inspect with `escalation dead list`")
        return {"dead": n}

    jobs = [Job("reconcile", 300, do_reconcile), Job("dead_letter_alerts", 60, dead_alerts)]
    try:
        from escalation.adapters.partitions import ensure_partitions
    except ImportError:  # pragma: no cover - the partitions adapter ships with the package
        return jobs

    def partitions() -> dict[str, Any]:
        ahead = int(getattr(app.settings, "audit_partitions_ahead", 3))
        made = ensure_partitions(app.engine, from_ms(rel.now_ms()), ahead)
        return {"created": list(made)}

    jobs.append(Job("partitions", 3600, partitions))
    return jobs


def for_app(app: Any, *, ttl_ms: int | None = None) -> Maintenance:
    """The worker's Maintenance: lease = 3 x lock_ttl (>= 15 s), the default jobs."""
    rel = ReliabilityRedis(app.redis, app.settings.namespace, app.settings.shards)
    ttl = ttl_ms or max(15_000, 3 * int(app.settings.lease_ms))
    lease = LeaderLease(rel, ttl_ms=ttl)
    return Maintenance(engine=app.engine, lease=lease, jobs=default_jobs(app, rel),
                       actor=app.actor)


def poll_safely(maintenance: Maintenance) -> list[str]:
    """``maintenance.poll()`` for the worker loop: a failure is logged, never fatal."""
    try:
        return maintenance.poll()
    except Exception as exc:
        log.warning("maintenance.failed", error=str(exc)[:300])
        return []
