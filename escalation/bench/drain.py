"""Scenario ``drain``: N escalations due at one instant, W worker processes.

Method: start W ``escalation worker`` processes (JSON logs), enqueue N escalations through
the service layer (PostgreSQL record + Redis) all due at the same instant ``D`` (Redis
TIME + 2 s + 1.5x the enqueue time estimated from a 500-escalation sample, so the enqueue
ends first; ``on_time_start`` says whether it did), then wait until the stats
counter ``applied`` reaches N. Each ``escalation.promoted`` event carries ``applied_ms``
(host clock right after the apply script returned) and ``lag_ms`` (Redis TIME at claim minus
due). Figures: throughput = N / (last applied_ms - D); apply lag = applied_ms - D
(p50/p99/max); claim lag p50/p99. Afterwards the ledger must hold exactly N PROMOTED rows
for N distinct disputes written by these workers (``ledger_ok``).
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from escalation.bench.common import (
    Target,
    WorkerProc,
    load,
    new_namespace,
    percentile,
    wait_started,
)
from escalation.bootstrap import core_ports_for
from escalation.domain.timeutil import from_ms
from escalation.service_layer.enqueue import EnqueueMany, EnqueueRequest, enqueue_many

ENQUEUE_CHUNK = 2000


def _requests(n: int, due_ms: int) -> list[EnqueueRequest]:
    due = from_ms(due_ms)
    reqs = []
    for i in range(n):
        did = uuid.uuid4()
        reqs.append(EnqueueRequest(
            dispute_id=did, materiality=f"{i % 5000}.25",
            source_hash=hashlib.sha256(did.bytes).hexdigest(), due_at=due,
        ))
    return reqs


def _enqueue_rate(app: Any, sample: int = 500) -> float:
    """Escalations/s of the service-layer enqueue right now (a throwaway sample of 500, due
    a day ahead, in the run's namespace: they never fire during the run). Sizes the lead
    so the whole enqueue ends before the due instant even on a loaded machine."""
    due_ms = int(app.scheduler.time().timestamp() * 1000) + 86_400_000
    t0 = time.monotonic()
    enqueue_many(
        EnqueueMany(requests=_requests(sample, due_ms), actor=app.actor,
                    default_ladder=app.settings.default_ladder),
        core_ports_for(app),
    )
    return sample / max(time.monotonic() - t0, 1e-3)


def _applied(client: Any, namespace: str, shards: int = 1) -> int:
    """The ``applied`` counters of every shard's stats hash, summed."""
    from escalation.composition_bench import applied_count

    return applied_count(client, namespace, shards)


@dataclass(frozen=True, slots=True)
class DrainRound:
    """One drain (the command of :func:`run_once`): ``n`` escalations, ``workers``
    processes claiming ``batch_size`` at a time over ``shards`` shards; ``lead_s``: how far
    ahead of the enqueue's end they fall due, s (None: from the enqueue rate);
    ``timeout_s``: how long the drain may take, s (None: from ``n``)."""

    n: int
    workers: int
    batch_size: int
    lead_s: float | None = None
    timeout_s: float | None = None
    shards: int = 1


def run_once(tgt: Target, cmd: DrainRound) -> dict[str, Any]:
    """One drain of ``cmd.n`` escalations with ``cmd.workers`` processes at
    ``cmd.batch_size`` over ``cmd.shards`` shards (``ESCALATION_SHARDS`` of the client and
    of every worker).

    Returns:
        dict with n, workers, batch_size, shards, redis (the URL's scheme), rate_per_s,
        lag_ms {p50, p99, max}, claim_lag_ms {p50, p99}, enqueue_s, lead_s, on_time_start
        (enqueue finished before the due instant), ledger_rows, ledger_ok, load.

    Raises:
        RuntimeError: a worker failed to start; TimeoutError: not drained in ``timeout_s``.
    """
    n, workers, batch_size, shards = cmd.n, cmd.workers, cmd.batch_size, cmd.shards
    lead_s, timeout_s = cmd.lead_s, cmd.timeout_s
    ns = new_namespace()
    app = tgt.app(ns, shards=shards)
    client = tgt.redis()
    lead = lead_s if lead_s is not None else 2.0 + 1.5 * n / _enqueue_rate(app)
    limit = timeout_s if timeout_s is not None else 60.0 + n / 200
    procs = [
        WorkerProc.start(tgt.worker_env(ns, f"{ns}-w{i}", batch_size=batch_size,
                                        poll_interval_s=5, shards=shards), f"{ns}-w{i}")
        for i in range(workers)
    ]
    try:
        start_load = load()
        due_ms = int(app.scheduler.time().timestamp() * 1000) + int(lead * 1000)
        reqs = _requests(n, due_ms)
        t0 = time.monotonic()
        for start in range(0, n, ENQUEUE_CHUNK):
            enqueue_many(
                EnqueueMany(requests=reqs[start : start + ENQUEUE_CHUNK], actor=app.actor,
                            default_ladder=app.settings.default_ladder),
                core_ports_for(app),
            )
        enqueue_s = time.monotonic() - t0
        enq_done_ms = int(app.scheduler.time().timestamp() * 1000)
        wait_started(procs)
        end = time.monotonic() + lead + limit
        while _applied(client, ns, shards) < n:
            if time.monotonic() > end:
                raise TimeoutError(f"drain: only {_applied(client, ns, shards)} of {n} applied")
            if any(p.proc.poll() is not None for p in procs):
                raise RuntimeError("drain: a worker exited early")
            time.sleep(0.02)
        # ``applied`` also counts re-applied stale claims (a lease that ran out on a loaded
        # machine lets a second worker claim a member the first then records): stop the
        # workers only once the ledger holds every decision, or the check below under-counts
        while _ledger_count(tgt, ns)[0] < n and time.monotonic() < end:
            time.sleep(0.1)
        for p in procs:
            p.stop()
        events = [e for p in procs for e in p.events("escalation.promoted")]
        applied = [int(e["applied_ms"]) for e in events]
        lags = [a - due_ms for a in applied]
        claim_lags = [int(e["lag_ms"]) for e in events]
        ledger_rows, distinct = _ledger_count(tgt, ns)
        span_ms = max(applied) - due_ms if applied else None
        return {
            "scenario": "drain", "n": n, "workers": workers, "batch_size": batch_size,
            "shards": shards, "redis": tgt.redis_url.partition("://")[0],
            "rate_per_s": round(n / (span_ms / 1000), 1) if span_ms else None,
            "span_ms": span_ms,
            "lag_ms": {"p50": percentile(lags, 50), "p99": percentile(lags, 99),
                       "max": max(lags) if lags else None},
            "claim_lag_ms": {"p50": percentile(claim_lags, 50),
                             "p99": percentile(claim_lags, 99)},
            "events": len(events), "enqueue_s": round(enqueue_s, 2), "lead_s": round(lead, 2),
            "on_time_start": enq_done_ms < due_ms,
            "ledger_rows": ledger_rows, "ledger_distinct": distinct,
            "ledger_ok": ledger_rows == n and distinct == n,
            "load": start_load,
        }
    except Exception as exc:
        kept = [str(p.keep_log(f"drain failed: {exc}")) for p in procs]
        raise RuntimeError(f"{exc} (worker logs kept: {', '.join(kept)})") from exc
    finally:
        for p in procs:
            p.close()
        client.close()
        tgt.cleanup_namespace(ns)


def _ledger_count(tgt: Target, namespace: str) -> tuple[int, int]:
    """PROMOTED rows and distinct disputes written by this run's workers."""
    engine = tgt.engine()
    try:
        with engine.connect() as conn:
            row = conn.execute(
                sa.text("SELECT count(*), count(DISTINCT dispute_id) FROM escalation_audit "
                        "WHERE event = 'PROMOTED' AND actor LIKE :pfx"),
                {"pfx": f"{namespace}-w%"},
            ).one()
        return int(row[0]), int(row[1])
    finally:
        engine.dispose()


@dataclass(frozen=True, slots=True)
class DrainGrid:
    """Every drain of a grid (the command of :func:`run`): ``n`` escalations each, every
    worker count of ``workers`` with every batch size of ``batch_sizes``; ``lead_s`` and
    ``shards`` as in :class:`DrainRound`."""

    n: int
    workers: list[int]
    batch_sizes: list[int]
    lead_s: float | None = None
    shards: int = 1


def run(tgt: Target, cmd: DrainGrid) -> dict[str, Any]:
    """Every (workers, batch size) combination; returns ``{"scenario": "drain", "runs": [...]}``
    with ``ok`` = every run's ledger check passed."""
    runs = [run_once(tgt, DrainRound(cmd.n, w, b, cmd.lead_s, shards=cmd.shards))
            for w in cmd.workers for b in cmd.batch_sizes]
    return {"scenario": "drain", "runs": runs, "ok": all(r["ledger_ok"] for r in runs),
            "load": load()}
