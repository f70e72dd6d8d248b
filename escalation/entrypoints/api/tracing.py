"""OpenTelemetry tracing of the HTTP API: off unless ``ESCALATION_OTEL_ENDPOINT`` is set.

The ``otel`` extra (``pip install 'escalation[otel]'``: ``opentelemetry-api``,
``opentelemetry-sdk``, ``opentelemetry-exporter-otlp-proto-http``) provides it; without the
extra and without the setting nothing of OpenTelemetry is imported. ``edge.Edge`` opens one
SERVER span per request (name ``<METHOD> <route template>``, the W3C ``traceparent`` it
carries as parent) and every route that writes the ledger (create, batch, cancel, pause,
resume, actions, resolve) opens a child span ``ledger.write`` around the write
(:func:`child_span`). docs/adr/0015-http-edge.md says why spans come from a small
middleware of our own rather than the FastAPI instrumentation package.

W3C trace context (https://www.w3.org/TR/trace-context/): :func:`parse_traceparent` reads the
header with or without the extra, so an escalation created by a request carrying one records
its trace id on the ledger row (``trace_id``) and in the worker's log lines of it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from escalation.domain.errors import ConfigError

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


def finish(span: Any, route: str, method: str, status: int, request_id: str) -> None:
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
