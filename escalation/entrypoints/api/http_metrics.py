"""The API's own HTTP metrics, by route template (served with the others on ``/metrics``).

==================================================  =========================================
metric                                              meaning
==================================================  =========================================
``escalation_http_requests_total``                  requests answered, labels ``route``
                                                    (the route template, e.g.
                                                    ``/v1/escalations/{dispute_id}``;
                                                    ``unmatched`` when no route matched),
                                                    ``method``, ``status``
``escalation_http_request_duration_seconds``        time from the first byte of the request
(histogram)                                         to the end of the response, labels
                                                    ``route``, ``method``
``escalation_http_requests_shed_total``             requests answered 503 at once because
                                                    ``api_max_in_flight`` were being served
``escalation_http_requests_in_flight``              requests being served (gauge; summed over
                                                    the worker processes)
==================================================  =========================================

Labels are route templates, never raw paths, so a scan of random URLs adds one series
(``unmatched``), not one per URL.

With one worker process the figures live in this process's memory. ``escalation serve
--workers N`` (N > 1) gives every process a directory of its own figures
(``PROMETHEUS_MULTIPROC_DIR``, set by ``serve`` before the processes start, the Prometheus
client's multi-process mode) and a scrape, whichever process answers it, reads them all.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Latency buckets (seconds): from a cached read (about 1 ms) to a 1,000-item batch."""

REGISTRY = CollectorRegistry(auto_describe=True)
"""This process's HTTP metrics (read directly with one worker process)."""

REQUESTS = Counter("escalation_http_requests", "HTTP requests answered, by route template, "
                   "method and status.", ["route", "method", "status"], registry=REGISTRY)
DURATION = Histogram("escalation_http_request_duration_seconds",
                     "HTTP request duration by route template and method (seconds).",
                     ["route", "method"], buckets=BUCKETS_S, registry=REGISTRY)
SHED = Counter("escalation_http_requests_shed", "Requests answered 503 at once because "
               "api_max_in_flight requests were being served (load shedding).",
               registry=REGISTRY)
IN_FLIGHT = Gauge("escalation_http_requests_in_flight", "HTTP requests being served.",
                  registry=REGISTRY, multiprocess_mode="livesum")


def observe(route: str, method: str, status: int, seconds: float) -> None:
    """Count one answered request and its duration (``seconds``, from a monotonic clock)."""
    REQUESTS.labels(route, method, str(status)).inc()
    DURATION.labels(route, method).observe(seconds)


class HttpCollector(Collector):
    """The HTTP metrics of every worker process (multi-process mode) or of this one."""

    def collect(self) -> Iterator[Metric]:
        """Yield the families of the module table."""
        path = os.environ.get(MULTIPROC_ENV)
        if path:
            from prometheus_client.multiprocess import MultiProcessCollector

            collector = MultiProcessCollector(None, path=path)  # type: ignore[no-untyped-call]
            yield from collector.collect()  # type: ignore[no-untyped-call]
            return
        yield from REGISTRY.collect()
