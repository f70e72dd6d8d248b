"""A worker's metrics count decisions from the events ``fire_due`` emits, whatever their log
level: per-decision events are DEBUG, the counters must still move."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry

from escalation.entrypoints.worker_metrics import WorkerMetrics


def test_debug_decision_events_are_counted_and_passed_on() -> None:
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    seen: list[tuple[str, dict[str, Any]]] = []
    sink = metrics.sink(lambda event, **kw: seen.append((event, kw)), time.monotonic())
    sink("escalation.promoted", match_decision="PROMOTED_TO_SENIOR", lag_ms=1500,
         level="debug")
    sink("escalation.terminal", match_decision="TERMINAL_COMPLIANCE", lag_ms=0, level="debug")
    sink("worker.batch", claimed=2, level="info")
    assert registry.get_sample_value("escalation_worker_decisions_total",
                                     {"kind": "PROMOTED_TO_SENIOR"}) == 1
    assert registry.get_sample_value("escalation_worker_decisions_total",
                                     {"kind": "TERMINAL_COMPLIANCE"}) == 1
    assert registry.get_sample_value("escalation_worker_firing_lag_seconds_count") == 2
    assert [e for e, _ in seen] == ["escalation.promoted", "escalation.terminal", "worker.batch"]
    assert seen[0][1]["level"] == "debug"
