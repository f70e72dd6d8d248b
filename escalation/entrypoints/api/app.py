"""The ASGI application: ``create_app(settings)``; ``factory()`` for uvicorn workers.

``escalation serve`` runs ``uvicorn escalation.entrypoints.api.app:factory --factory``;
each worker process builds its own ``bootstrap.App`` (Redis pool, SQLAlchemy engine, ladders,
calendars) in the lifespan and closes it on shutdown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from escalation.entrypoints.api import problems
from escalation.settings import Settings

DESCRIPTION = """\
Dispute SLA escalations over HTTP: schedule an escalation when a dispute enters a review
tier, read its state and deadlines, cancel, pause and resume it, read the audit ledger and
the SLA report. Every request needs `Authorization: Bearer <token>` (from `escalation token
create`) except the probes `GET /livez`, `/healthz` and `/readyz` (up or down only; a token
adds the details), checked before anything else of the request is read (an
anonymous request is 401 whatever its body or parameters). Errors are RFC 9457
`application/problem+json`. A query parameter a route does not declare is refused (422),
never ignored. Limits: a body over the configured size is 413, a JSON body too deep or with
too many keys 422, repeated failed authentication 429 with `Retry-After`; more than
`api_max_in_flight` requests in flight in a process, or a backing service down, 503 with
`Retry-After`. `X-Request-ID` (1-128 of `[A-Za-z0-9._:-]`) is returned as sent, else a new
one; a W3C `traceparent` gives a created escalation its `trace_id` when the body has none.
A token may be scoped to some sources (its disputes only) and to reads.
A dispute is addressed by UUID (`/v1/escalations/{dispute_id}`) or by its source system's
id (`/v1/sources/{source}/escalations/{external_id}`).
"""


def _operation_id(route: Any) -> str:
    from escalation.entrypoints.api.contract import operation_id

    return operation_id(route)


def create_app(settings: Settings | None = None, tracer_provider: Any = None) -> FastAPI:
    """The FastAPI app. ``settings`` None = read them from the environment at startup.

    ``tracer_provider``: an OpenTelemetry ``TracerProvider`` to trace requests with (tests
    pass one with an in-memory exporter); None = the one ``ESCALATION_OTEL_ENDPOINT`` names,
    or no tracing when it is unset (``edge.tracer_provider``).
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from escalation.bootstrap import build, session_store_for, token_store_for
        from escalation.entrypoints.api.auth import SessionCache, Throttle, TokenCache
        from escalation.logs import configure_logging
        from escalation.settings import get_settings

        s = settings or get_settings()
        configure_logging(s.log_format, s.log_level)
        core = build(s, actor="api")
        app.state.core = core
        from escalation.entrypoints.api.edge import TRACER_NAME
        from escalation.entrypoints.api.edge import tracer_provider as provider_for

        provider = tracer_provider or provider_for(s.otel_endpoint)
        app.state.tracer = None if provider is None else provider.get_tracer(TRACER_NAME)
        app.state.tokens = TokenCache(token_store_for(core), s.api_token_cache_s,
                                      s.api_negative_cache_s)
        app.state.throttle = Throttle(s.api_auth_fail_limit, s.api_auth_fail_window_s)
        # a session check is cached at most a quarter of the idle timeout (the idle clock is
        # the row's last_seen_at, refreshed on each check that reaches PostgreSQL)
        app.state.sessions = SessionCache(session_store_for(core),
                                          min(s.api_token_cache_s, s.console_session_idle_s / 4),
                                          s.console_session_idle_s,
                                          s.console_session_rotate_s,
                                          s.console_session_rotate_grace_s)
        from escalation.entrypoints.api.batching import CreateBatcher

        app.state.batcher = CreateBatcher(core)
        try:
            yield
        finally:
            app.state.batcher.close()
            core.close()
            if provider is not None and tracer_provider is None:
                provider.shutdown()  # sends the spans still buffered

    app = FastAPI(
        title="escalation", version="1", description=DESCRIPTION, lifespan=lifespan,
        # no anonymous route but /healthz: the document is docs/openapi.json, not served
        openapi_url=None, docs_url=None, redoc_url=None,
        # a path with a trailing slash is a 404 problem document, not a 307 redirect that a
        # client would follow without its Authorization header
        redirect_slashes=False,
        generate_unique_id_function=_operation_id,
        openapi_tags=[
            {"name": "escalations", "description": "Create, read, cancel, pause, resume."},
            {"name": "audit", "description": "The ledger, ladders and the SLA report."},
            {"name": "operations", "description": "Health, readiness and metrics."},
        ],
    )
    problems.install(app)
    from escalation.entrypoints.api import contract

    contract.install(app)  # named operation ids, every error status declared as problem+json
    from escalation.entrypoints.api.guard import Guard

    # authentication, permission and body limits before routing reads anything (ADR 0011)
    app.add_middleware(Guard)
    from escalation.entrypoints.api.edge import Edge

    # outermost: request id, load shedding, tracing, access log and HTTP metrics (edge.py)
    app.add_middleware(Edge)
    from fastapi import Depends

    from escalation.entrypoints.api import metrics, routes_audit, routes_escalations, routes_ops
    from escalation.entrypoints.api.auth import authorize
    from escalation.entrypoints.api.deps import refuse_unknown_query, require_json

    # every API route checks the token's permission before any parameter, then refuses
    # query parameters it does not declare (a misspelt filter must not widen a result
    # silently); the console below reads its form fields itself
    for router in (routes_escalations.router, routes_audit.router, routes_ops.router,
                   metrics.router):
        app.include_router(router, dependencies=[Depends(authorize),
                                                 Depends(refuse_unknown_query),
                                                 Depends(require_json)])
    app.include_router(routes_ops.health_router)  # a probe's query string is not a filter
    from escalation.entrypoints.api import console

    console.install(app)
    return app


def factory() -> FastAPI:
    """uvicorn ``--factory`` entry point: settings from the environment."""
    return create_app()


