"""The probes: ``/healthz`` and ``/livez`` (anonymous: the process is up) and ``/readyz``
(Redis and PostgreSQL reachable, schema at the Alembic head, every ladder file valid;
anonymous up/down, details with a token). None of them is shed under load (``edge``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from escalation.entrypoints.api.models import Liveness, Problem, Readiness
from escalation.entrypoints.api.problems import RETRY_AFTER_S
from escalation.logs import get_logger
from escalation.ports import ServerCheck, ServerFault

if TYPE_CHECKING:
    from escalation.bootstrap import App

_log = get_logger(__name__)

router = APIRouter(tags=["operations"])

health_router = APIRouter(tags=["operations"])
"""The probes: included without the unknown-query-parameter check (a load balancer
may add a cache-busting query string, and a probe that fails on one marks a healthy server
down)."""


@health_router.get("/healthz", response_model=Liveness)
def healthz() -> dict[str, str]:
    """200 while the process serves requests (no token needed, no backing service touched).
    GET or HEAD (probes use either); any query string is ignored."""
    return {"status": "ok"}


@health_router.head("/healthz", include_in_schema=False)
def healthz_head() -> dict[str, str]:
    """``HEAD /healthz``: the GET's status and headers (the server sends no body)."""
    return {"status": "ok"}


@health_router.get("/livez", response_model=Liveness)
def livez() -> dict[str, str]:
    """Liveness (Kubernetes ``livenessProbe``): 200 ``{"status": "ok"}`` while the process
    serves requests. No token, no backing service touched, never shed; GET or HEAD."""
    return {"status": "ok"}


@health_router.head("/livez", include_in_schema=False)
def livez_head() -> dict[str, str]:
    """``HEAD /livez``: the GET's status and headers (the server sends no body)."""
    return {"status": "ok"}


def _shown(check: ServerCheck) -> str:
    """What a readiness check says of one server: ``ok`` or a kind, never the driver's text
    (which may name an internal address); the text goes to the log."""
    if check.fault is None:
        return "ok"
    if check.fault is ServerFault.SCHEMA_NOT_AT_HEAD:
        return "schema not at head (run escalation db upgrade)"
    _log.warning("api.readiness_check_failed", error=check.error)
    return check.fault.value


def ladder_check(core: App) -> str | dict[str, Any]:
    """The ``ladders`` entry of ``/readyz`` details: ``"ok"``, or the released versions
    this process cannot read from its ladder directory and the invalid files in it."""
    ladders = core.ladders
    unreadable = ladders.unreadable()
    invalid = list(ladders.files.errors)
    if not unreadable and not invalid:
        return "ok"
    return {"state": "degraded",
            "unreadable": [{"ladder": u.ladder, "version": u.version, "reason": u.fault.value,
                            "file": u.file, "expected_checksum": u.expected_checksum,
                            "found_checksum": u.found_checksum,
                            "action": u.advice()} for u in unreadable],
            "invalid_files": invalid}


@health_router.get("/readyz", responses={
    200: {"model": Readiness, "description": "Ready (`checks` only with a token)."},
    401: {"model": Problem, "content": {"application/problem+json": {}},
          "description": "A token was sent and is invalid, expired or revoked."},
    503: {"model": Readiness, "description": "Not ready (`Retry-After`; `checks`, with a "
          "token, says why)."}})
def readyz(request: Request) -> JSONResponse:
    """Readiness (Kubernetes ``readinessProbe``): 200 if Redis and PostgreSQL answer and the
    schema is at head, else 503 with ``Retry-After``. Without a token the body is
    ``{"status": "ready"}`` or ``{"status": "not ready"}`` and nothing more; with any valid
    token it adds ``checks`` (each ``ok`` or what failed, never an address). ``ladders`` is
    ``ok`` or ``{"state": "degraded", "unreadable": [...], "invalid_files": [...]}``: released
    versions this server cannot read from its ladder directory (ladder, version, fault,
    expected and found checksum, what to do) are refused for new escalations while the rest
    is served, so they do not make the server not ready. Never shed."""
    from escalation.bootstrap import readiness_probe_for

    core = request.app.state.core
    servers = readiness_probe_for(core).check()
    checks: dict[str, Any] = {"redis": _shown(servers.redis_check),
                              "postgres": _shown(servers.postgres_check),
                              "ladders": ladder_check(core)}
    # the ladder directory never takes the server out of rotation: every escalation pinned
    # to a version it can read is still served (a create on an unreadable one is refused)
    ok = all(v == "ok" for k, v in checks.items() if k != "ladders")
    body: dict[str, Any] = {"status": "ready" if ok else "not ready"}
    if getattr(request.state, "token", None) is not None:
        body["checks"] = checks
    headers = None if ok else {"Retry-After": str(RETRY_AFTER_S)}
    return JSONResponse(body, status_code=200 if ok else 503, headers=headers)
