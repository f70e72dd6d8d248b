"""``/healthz`` (anonymous: the process is up) and ``/readyz`` (Redis and PostgreSQL
reachable, schema at the Alembic head, every ladder file valid)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from escalation.entrypoints.api.auth import StatusReader
from escalation.entrypoints.api.deps import Core

router = APIRouter(tags=["operations"])

health_router = APIRouter(tags=["operations"])
"""``/healthz`` alone: included without the unknown-query-parameter check (a load balancer
may add a cache-busting query string, and a probe that fails on one marks a healthy server
down)."""


@health_router.get("/healthz")
def healthz() -> dict[str, str]:
    """200 while the process serves requests (no token needed, no backing service touched).
    GET or HEAD (probes use either); any query string is ignored."""
    return {"status": "ok"}


@health_router.head("/healthz", include_in_schema=False)
def healthz_head() -> dict[str, str]:
    """``HEAD /healthz``: the GET's status and headers (the server sends no body)."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "Not ready; `checks` says why."}})
def readyz(core: Core, token: StatusReader) -> JSONResponse:
    """200 if Redis and PostgreSQL answer, the schema is at head and the ladders are valid;
    else 503 with the failing checks."""
    from escalation.adapters.db import check_at_head

    checks: dict[str, Any] = {}
    try:
        core.redis.ping()
        checks["redis"] = "ok"
    except Exception as exc:
        checks["redis"] = f"unreachable: {str(exc).splitlines()[0] if str(exc) else exc!r}"
    try:
        check_at_head(core.engine)
        checks["postgres"] = "ok"
    except Exception as exc:
        checks["postgres"] = str(exc).strip().splitlines()[0] if str(exc) else repr(exc)
    checks["ladders"] = "ok" if not core.ladders.errors else core.ladders.errors
    ok = all(v == "ok" for v in checks.values())
    return JSONResponse({"status": "ready" if ok else "not ready", "checks": checks},
                        status_code=200 if ok else 503)
