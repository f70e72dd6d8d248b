"""The HTTP edge: the outermost ASGI layer of the API (before ``guard.Guard``), its trace
context and spans, and its metrics.

For every HTTP request, in this order:

1. **request id**: ``X-Request-ID`` from the client if it is 1-128 characters of
   ``[A-Za-z0-9._:-]`` (:func:`request_id_of`), else a new random one; returned as
   ``X-Request-ID`` on the response (with ``Retry-After`` added to any 503 that has none,
   e.g. a console page's, and the cookie of a console session id rotated while the request
   was served: ``state["session_cookie"]``, ADR 0011) and bound (structlog contextvars)
   into every log line of the request, with the W3C ``traceparent``'s trace id as
   ``trace_id`` when there is one;
2. **load shedding**: with ``api_max_in_flight`` requests already being served by this
   process, the request is answered 503 ``/problems/unavailable`` with ``Retry-After: 1`` at
   once (nothing read, nothing written, no token looked up; the response pre-rendered); the
   probes (:data:`PROBES`) are never shed. Shed requests are counted one by one
   (``escalation_http_requests_shed_total``) and logged at most once a second per process
   (``shed_count`` says how many), so an overload does not also flood the log;
3. **tracing** (only with ``ESCALATION_OTEL_ENDPOINT``): one SERVER span (below);
4. after the response: one access log line ``http.request`` (``request_id``, ``method``,
   ``route`` the route template, ``status``, ``duration_ms``, ``token`` the token's *name*,
   never the token, ``client``; level warning for a 5xx) and the HTTP metrics
   (below).

The route template is what routing matched (``/v1/escalations/{dispute_id}``), ``unmatched``
when nothing did: never the raw path, so ids do not reach metric labels.

Tracing
-------

OpenTelemetry tracing of the HTTP API: off unless ``ESCALATION_OTEL_ENDPOINT`` is set.

The ``otel`` extra (``pip install 'escalation[otel]'``: ``opentelemetry-api``,
``opentelemetry-sdk``, ``opentelemetry-exporter-otlp-proto-http``) provides it; without the
extra and without the setting nothing of OpenTelemetry is imported. ``Edge`` opens one
SERVER span per request (name ``<METHOD> <route template>``, the W3C ``traceparent`` it
carries as parent) and every route that writes the ledger (create, batch, cancel, pause,
resume, actions, resolve) opens a child span ``ledger.write`` around the write
(:func:`child_span`). docs/adr/0015-http-edge.md says why spans come from a small
middleware of our own rather than the FastAPI instrumentation package.

W3C trace context (https://www.w3.org/TR/trace-context/): :func:`parse_traceparent` reads the
header with or without the extra, so an escalation created by a request carrying one records
its trace id on the ledger row (``trace_id``) and in the worker's log lines of it.

HTTP metrics
------------

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

import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from escalation.domain.errors import ConfigError
from escalation.entrypoints.api.problems import RETRY_AFTER_S
from escalation.logs import get_logger

PROBES = frozenset({"/livez", "/readyz", "/healthz"})
"""Never shed: a probe that fails under load would take a busy, healthy process down."""
SHED_RETRY_AFTER_S = 1
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
UNMATCHED = "unmatched"
_log = get_logger("escalation.api.access")


def request_id_of(value: bytes | None) -> str | None:
    """A client's ``X-Request-ID`` if it is safe to log and echo (1-128 characters of
    letters, digits, ``.``, ``_``, ``:``, ``-``), else None (a new id is used instead)."""
    if not value:
        return None
    text = value.decode("latin-1")
    return text if _REQUEST_ID.match(text) else None


def route_template(scope: Scope) -> str:
    """The template of the route routing matched (with its mount prefix), or ``unmatched``;
    a parameter's converter is left out (``{external_id}``, not ``{external_id:...}``)."""
    route = scope.get("route")
    path = (getattr(route, "path_format", None) or getattr(route, "path", None)
            if route is not None else None)
    if not isinstance(path, str):
        return UNMATCHED
    return str(scope.get("root_path", "")) + path


class Edge:
    """The middleware (see the module docstring). Reads ``api_max_in_flight`` from the app's
    ``state.core.settings`` and the tracer from ``state.tracer`` (None = tracing off)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.in_flight = 0
        """Requests of this process being served now (one event loop: no lock needed)."""
        self._shed_body: tuple[int, bytes] | None = None
        self._shed_count = 0
        self._shed_logged_at = -1.0e9

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request as the module docstring says."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        app_state = scope["app"].state
        core = getattr(app_state, "core", None)
        limit = core.settings.api_max_in_flight if core is not None else None
        if (limit is not None and self.in_flight >= limit
                and scope["path"] not in PROBES):
            await self._shed(scope, send, limit)
            return
        start = time.perf_counter()
        headers: dict[bytes, bytes] = dict(scope["headers"])
        rid = request_id_of(headers.get(b"x-request-id")) or uuid.uuid4().hex
        state = scope.setdefault("state", {})
        state["request_id"] = rid
        trace_id = parse_traceparent(headers.get(b"traceparent"))
        method: str = scope["method"]
        status = [500]  # what the client got (500 if the app raised before answering)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
                extra = [(b"x-request-id", rid.encode("latin-1"))]
                if status[0] == 503 and not any(k.lower() == b"retry-after"
                                                for k, _ in message.get("headers", [])):
                    extra.append((b"retry-after", str(RETRY_AFTER_S).encode()))
                cookie = state.get("session_cookie")  # a console session id rotated
                if cookie is not None:
                    extra.append(cookie)
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        self.in_flight += 1
        IN_FLIGHT.inc()
        tracer = getattr(app_state, "tracer", None)
        try:
            if tracer is None:
                state["trace_id"] = trace_id
                await self._serve(scope, receive, send_with_id, rid, trace_id)
            else:
                with server_span(tracer, method, headers) as span:
                    # the span's trace id: the traceparent's, or a new trace's
                    state["trace_id"] = trace_id = trace_id_of(span)
                    try:
                        await self._serve(scope, receive, send_with_id, rid, trace_id)
                    finally:
                        finish_span(span, route_template(scope), method, status[0], rid)
        finally:
            self.in_flight -= 1
            IN_FLIGHT.dec()
            route = route_template(scope)
            seconds = time.perf_counter() - start
            observe_request(route, method, status[0], seconds)
            token = state.get("token")
            fields: dict[str, Any] = {
                "request_id": rid, "method": method, "route": route, "status": status[0],
                "duration_ms": round(seconds * 1000, 3),
                "token": getattr(token, "name", None), "client": _client(scope)}
            if trace_id:
                fields["trace_id"] = trace_id
            if status[0] >= 500:
                _log.warning("http.request", **fields)
            else:
                _log.info("http.request", **fields)

    async def _shed(self, scope: Scope, send: Send, limit: int) -> None:
        """Answer 503 at once, as cheaply as possible: an overloaded process must refuse
        faster than requests arrive. The problem document is rendered once per limit; the
        log gets at most one line per second for shed requests (``shed_count``: how many
        since the previous line, this one included), the counter every one."""
        rid = request_id_of(next((v for k, v in scope["headers"] if k == b"x-request-id"),
                                 None)) or uuid.uuid4().hex
        if self._shed_body is None or self._shed_body[0] != limit:
            doc = {"type": "/problems/unavailable",
                   "title": "A backing service is unavailable", "status": 503,
                   "detail": f"the server is at its limit of {limit} requests in flight "
                             f"(api_max_in_flight); retry after {SHED_RETRY_AFTER_S} s"}
            self._shed_body = (limit, json.dumps(doc).encode())
        body = self._shed_body[1]
        await send({"type": "http.response.start", "status": 503, "headers": [
            (b"content-type", b"application/problem+json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(SHED_RETRY_AFTER_S).encode()),
            (b"x-request-id", rid.encode("latin-1"))]})
        await send({"type": "http.response.body", "body": body})
        SHED.inc()
        self._shed_count += 1
        now = time.monotonic()
        if now - self._shed_logged_at >= 1.0:
            _log.warning("http.request", request_id=rid, method=scope["method"],
                         route=UNMATCHED, status=503, duration_ms=0.0, token=None,
                         client=_client(scope), shed=True, shed_count=self._shed_count,
                         limit=limit)
            self._shed_logged_at = now
            self._shed_count = 0

    async def _serve(self, scope: Scope, receive: Receive, send: Send, rid: str,
                     trace_id: str | None) -> None:
        bound = {"request_id": rid, **({"trace_id": trace_id} if trace_id else {})}
        tokens = structlog.contextvars.bind_contextvars(**bound)
        try:
            await self.app(scope, receive, send)
        finally:
            structlog.contextvars.reset_contextvars(**tokens)


def _client(scope: Scope) -> str | None:
    client = scope.get("client")
    return str(client[0]) if client else None


# Tracing

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
TRACER_NAME = "escalation.api"


def parse_traceparent(value: bytes | str | None) -> str | None:
    """The 32-hex trace id of a W3C ``traceparent`` header value, or None (absent, malformed,
    version ``ff``, or an all-zero trace or parent id: the header is then ignored, as the
    recommendation says)."""
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    m = _TRACEPARENT.match(text.strip().lower())
    if m is None or m.group(1) == "ff":
        return None
    if m.group(2) == "0" * 32 or m.group(3) == "0" * 16:
        return None
    return m.group(2)


def tracer_provider(endpoint: str | None) -> Any:
    """An SDK ``TracerProvider`` exporting in batches over OTLP/HTTP to ``endpoint``, or None
    when ``endpoint`` is None (tracing off).

    Raises:
        ConfigError: ``ESCALATION_OTEL_ENDPOINT`` is set but the ``otel`` extra is missing.
    """
    if endpoint is None:
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ConfigError("ESCALATION_OTEL_ENDPOINT (otel_endpoint) is set but OpenTelemetry "
                          f"is not installed ({exc.name}): pip install 'escalation[otel]'"
                          ) from None
    provider = TracerProvider(resource=Resource.create({"service.name": "escalation"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


_TRACER: ContextVar[Any] = ContextVar("escalation_api_tracer", default=None)
"""The tracer of the request being served (None: tracing off); a context variable, so a
route run in the thread pool sees it too (its context is copied)."""


@contextmanager
def server_span(tracer: Any, method: str, headers: dict[bytes, bytes]) -> Iterator[Any]:
    """The request's SERVER span, current for the request (its parent: the ``traceparent``
    header's, if any); yields the span (``edge.Edge`` names it once routing is done)."""
    from opentelemetry import context, trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers.items()
               if k in (b"traceparent", b"tracestate")}
    parent = TraceContextTextMapPropagator().extract(carrier)
    span = tracer.start_span(method, context=parent, kind=trace.SpanKind.SERVER,
                             attributes={"http.request.method": method})
    token = context.attach(trace.set_span_in_context(span, parent))
    current = _TRACER.set(tracer)
    try:
        yield span
    finally:
        _TRACER.reset(current)
        context.detach(token)
        span.end()


def trace_id_of(span: Any) -> str:
    """The 32-hex trace id of an OpenTelemetry span."""
    return format(span.get_span_context().trace_id, "032x")


def finish_span(span: Any, route: str, method: str, status: int, request_id: str) -> None:
    """Name the SERVER span ``<METHOD> <route>`` and set its HTTP attributes (status >= 500
    marks it an error, per the HTTP semantic conventions)."""
    from opentelemetry.trace import Status, StatusCode

    span.update_name(f"{method} {route}")
    span.set_attribute("http.route", route)
    span.set_attribute("http.response.status_code", status)
    span.set_attribute("escalation.request_id", request_id)
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR))


@contextmanager
def child_span(name: str, **attributes: str | int) -> Iterator[None]:
    """A span ``name`` under the request's SERVER span (e.g. ``ledger.write`` around a
    route's write), or nothing when tracing is off."""
    tracer = _TRACER.get()
    if tracer is None:
        yield
        return
    with tracer.start_as_current_span(name, attributes=attributes):
        yield


# HTTP metrics

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


def observe_request(route: str, method: str, status: int, seconds: float) -> None:
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
