"""The edge middleware: the outermost ASGI layer of the API, before ``guard.Guard``.

For every HTTP request, in this order:

1. **request id**: ``X-Request-ID`` from the client if it is 1-128 characters of
   ``[A-Za-z0-9._:-]`` (:func:`request_id_of`), else a new random one; returned as
   ``X-Request-ID`` on the response (with ``Retry-After`` added to any 503 that has none,
   e.g. a console page's) and bound (structlog contextvars) into every log line of
   the request, with the W3C ``traceparent``'s trace id as ``trace_id`` when there is one;
2. **load shedding**: with ``api_max_in_flight`` requests already being served by this
   process, the request is answered 503 ``/problems/unavailable`` with ``Retry-After: 1`` at
   once (nothing read, nothing written, no token looked up; the response pre-rendered); the
   probes (:data:`PROBES`) are never shed. Shed requests are counted one by one
   (``escalation_http_requests_shed_total``) and logged at most once a second per process
   (``shed_count`` says how many), so an overload does not also flood the log;
3. **tracing** (``tracing``; only with ``ESCALATION_OTEL_ENDPOINT``): one SERVER span;
4. after the response: one access log line ``http.request`` (``request_id``, ``method``,
   ``route`` the route template, ``status``, ``duration_ms``, ``token`` the token's *name*,
   never the token, ``client``; level warning for a 5xx) and the HTTP metrics
   (``http_metrics``).

The route template is what routing matched (``/v1/escalations/{dispute_id}``), ``unmatched``
when nothing did: never the raw path, so ids do not reach metric labels.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from escalation.entrypoints.api import http_metrics, tracing
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
        trace_id = tracing.parse_traceparent(headers.get(b"traceparent"))
        method: str = scope["method"]
        status = [500]  # what the client got (500 if the app raised before answering)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
                extra = [(b"x-request-id", rid.encode("latin-1"))]
                if status[0] == 503 and not any(k.lower() == b"retry-after"
                                                for k, _ in message.get("headers", [])):
                    extra.append((b"retry-after", str(RETRY_AFTER_S).encode()))
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        self.in_flight += 1
        http_metrics.IN_FLIGHT.inc()
        tracer = getattr(app_state, "tracer", None)
        try:
            if tracer is None:
                state["trace_id"] = trace_id
                await self._serve(scope, receive, send_with_id, rid, trace_id)
            else:
                with tracing.server_span(tracer, method, headers) as span:
                    # the span's trace id: the traceparent's, or a new trace's
                    state["trace_id"] = trace_id = tracing.trace_id_of(span)
                    try:
                        await self._serve(scope, receive, send_with_id, rid, trace_id)
                    finally:
                        tracing.finish(span, route_template(scope), method, status[0], rid)
        finally:
            self.in_flight -= 1
            http_metrics.IN_FLIGHT.dec()
            route = route_template(scope)
            seconds = time.perf_counter() - start
            http_metrics.observe(route, method, status[0], seconds)
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
        http_metrics.SHED.inc()
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
