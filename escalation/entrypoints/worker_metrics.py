"""A worker's own Prometheus metrics, served by ``escalation worker --metrics-port N``.

Each worker process exports what it did itself (prometheus-client's HTTP server on
``--metrics-addr`` (default 127.0.0.1) and ``--metrics-port``); scrape every worker.
Fleet-wide figures (pending, due now, decisions recorded, ...) come from the API's
``/metrics``, read from Redis and PostgreSQL.

* ``escalation_worker_decisions_total{kind}``: decisions this worker recorded;
* ``escalation_worker_firing_lag_seconds``: due time to applied, per decision: the claim's
  Redis TIME minus the due time, plus the host time from the claim to the end of the apply
  (monotonic clock; never a host wall clock compared with a Redis score);
* ``escalation_worker_batches_total``, ``escalation_worker_claimed_total``;
* ``escalation_worker_lease_expiries_total``: members claimed after an earlier lease lapsed;
* ``escalation_worker_stale_writes_refused_total{stage}``: ``record`` (PostgreSQL held a
  newer decision), ``apply`` (the fencing token was no longer held).
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from escalation.ports import LAG_BUCKETS_S
from escalation.service_layer.fire import BatchReport, EventSink


class WorkerMetrics:
    """Counters and the lag histogram of one worker process (own registry)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.decisions = Counter("escalation_worker_decisions", "Decisions recorded by kind.",
                                 ["kind"], registry=r)
        self.lag = Histogram("escalation_worker_firing_lag_seconds",
                             "Due time to applied, per decision (s).",
                             buckets=LAG_BUCKETS_S, registry=r)
        self.batches = Counter("escalation_worker_batches", "Claim batches run.", registry=r)
        self.claimed = Counter("escalation_worker_claimed", "Members claimed.", registry=r)
        self.lease_expiries = Counter("escalation_worker_lease_expiries",
                                      "Members claimed after an earlier lease lapsed.",
                                      registry=r)
        self.stale = Counter("escalation_worker_stale_writes_refused",
                             "Writes refused as stale, by stage (record, apply).",
                             ["stage"], registry=r)

    def sink(self, emit: EventSink, started: float) -> EventSink:
        """``emit`` wrapped to observe each decision event of a batch started at
        ``started`` (``time.monotonic()`` before the claim)."""

        def observe(event: str, **fields: Any) -> None:
            if event in ("escalation.promoted", "escalation.terminal"):
                self.decisions.labels(str(fields.get("match_decision", ""))).inc()
                lag_s = int(fields.get("lag_ms", 0)) / 1000 + (time.monotonic() - started)
                self.lag.observe(max(0.0, lag_s))
            emit(event, **fields)

        return observe

    def batch(self, report: BatchReport) -> None:
        """Count one ``fire_due`` batch."""
        self.batches.inc()
        self.claimed.inc(report.claimed)
        self.lease_expiries.inc(report.lease_expired)
        self.stale.labels("record").inc(report.stale)
        self.stale.labels("apply").inc(report.not_owner)

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        """Serve ``/metrics`` on ``addr:port`` from a daemon thread."""
        start_http_server(port, addr=addr, registry=self.registry)
