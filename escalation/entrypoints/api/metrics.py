"""``GET /metrics`` (Prometheus text format; compliance or admin token).

Every figure is read from Redis and PostgreSQL at scrape time by a custom collector, so any
uvicorn worker answers with the same numbers and nothing is lost when a process restarts:

==========================================================  ======================================
metric                                                      source
==========================================================  ======================================
``escalation_pending{ladder,tier}``                         PostgreSQL projection, status pending
``escalation_due_now``                                      Redis: members due at Redis TIME
``escalation_oldest_overdue_age_seconds``                   Redis: now - earliest due score
``escalation_decisions_total{kind}``                        ledger PROMOTED/TERMINAL rows,
                                                            plus removed partitions' (Redis)
``escalation_firing_lag_seconds`` (histogram)               ledger: decided_at - due_at (same)
``escalation_lease_expiries_total``                         Redis stats ``lease_expired``
``escalation_stale_writes_refused_total{reason}``           Redis stats ``not_owner`` (fencing
                                                            token) and ``stale_apply`` (seq)
``escalation_dead_letters``                                 Redis dead-letter ZSETs
``escalation_notifications_total{outcome}``                 Redis stats ``notify_delivered`` /
                                                            ``notify_failed``
``escalation_regulatory_deadlines_due_24h{deadline}``       PostgreSQL, open escalations
==========================================================  ======================================

The API's own HTTP figures (requests by route template, method and status; latency; shed
requests) are listed in ``entrypoints.api.edge``.

Workers export their in-process view (firing lag due -> applied, per batch) on their own
port: ``escalation worker --metrics-port N`` (``entrypoints.worker_metrics``).
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import APIRouter, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from escalation.bootstrap import App, metrics_figures_for
from escalation.entrypoints.api.auth import AuditReader
from escalation.entrypoints.api.deps import Core
from escalation.entrypoints.api.edge import HttpCollector

router = APIRouter(tags=["operations"])
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class EscalationCollector(Collector):
    """Collects the figures in the module table from ``core`` at each scrape."""

    def __init__(self, core: App) -> None:
        self._core = core

    def collect(self) -> Iterator[Metric]:
        """Yield every metric family (one Redis pass, three PostgreSQL queries)."""
        figures = metrics_figures_for(self._core)
        stats = self._core.scheduler.stats()
        pending = GaugeMetricFamily("escalation_pending",
                                    "Pending escalations by ladder and tier (PostgreSQL).",
                                    labels=["ladder", "tier"])
        for ladder, tier, n in figures.pending_by_ladder_tier():
            pending.add_metric([ladder, tier], n)
        yield pending
        yield GaugeMetricFamily("escalation_due_now",
                                "Scheduled members due at Redis TIME, not yet fired.",
                                value=int(stats.get("due_now") or 0))
        yield GaugeMetricFamily(
            "escalation_oldest_overdue_age_seconds",
            "Redis TIME minus the earliest due time still scheduled (0 = nothing overdue).",
            value=int(stats.get("oldest_overdue_ms") or 0) / 1000)
        # rows still attached + figures saved by retention: never falls across a drop
        figs = figures.decisions()
        kinds = CounterMetricFamily("escalation_decisions",
                                    "Recorded escalation decisions by kind (ledger).",
                                    labels=["kind"])
        for kind, n in figs.by_kind.items():
            kinds.add_metric([kind], n)
        yield kinds
        yield HistogramMetricFamily(
            "escalation_firing_lag_seconds",
            "Due time to decision (Redis TIME at the claim), recorded decisions (ledger).",
            buckets=[(repr(float(b)), c) for b, c in figs.lag_buckets.items()]
            + [("+Inf", figs.lag_count)],
            sum_value=figs.lag_sum_s)
        yield CounterMetricFamily("escalation_lease_expiries",
                                  "Claims of a member whose previous lease had expired.",
                                  value=int(stats.get("lease_expired") or 0))
        stale = CounterMetricFamily("escalation_stale_writes_refused",
                                    "Redis writes refused: fencing token no longer held "
                                    "(not_owner) or payload already newer (stale_seq).",
                                    labels=["reason"])
        stale.add_metric(["not_owner"], int(stats.get("not_owner") or 0))
        stale.add_metric(["stale_seq"], int(stats.get("stale_apply") or 0))
        yield stale
        yield GaugeMetricFamily("escalation_dead_letters", "Dead letters waiting (Redis).",
                                value=int(stats.get("dead") or 0))
        notes = CounterMetricFamily("escalation_notifications",
                                    "Review-queue notifications by delivery outcome.",
                                    labels=["outcome"])
        notes.add_metric(["delivered"], int(stats.get("notify_delivered") or 0))
        notes.add_metric(["failed"], int(stats.get("notify_failed") or 0))
        yield notes
        soon = GaugeMetricFamily("escalation_regulatory_deadlines_due_24h",
                                 "Regulatory deadlines of open escalations in the next 24 h.",
                                 labels=["deadline"])
        for name, n in figures.deadlines_due_within(24).items():
            soon.add_metric([name], n)
        yield soon


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE: {}},
                             "description": "Prometheus text exposition format."}})
def metrics(core: Core, token: AuditReader) -> Response:
    """Prometheus metrics (see docs/api.md, "Metrics")."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EscalationCollector(core))
    registry.register(HttpCollector())
    return Response(generate_latest(registry), media_type=CONTENT_TYPE)
