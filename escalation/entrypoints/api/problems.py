"""RFC 9457 problem details (``application/problem+json``) for every error the API returns.

Mapping (the same error classes the CLI maps to exit codes):

======================================  ======  ===========================
error                                   status  ``type``
======================================  ======  ===========================
request body/query fails its schema,    422     ``/problems/invalid-input``
or names an undeclared query parameter
``InvalidInput`` (domain validation)    422     ``/problems/invalid-input``
``LadderNotFound`` (a ladder that a    422     ``/problems/invalid-input``
body or query names: a request field)
``NotFound``                            404     ``/problems/not-found``
``ConflictError``                       409     ``/problems/conflict``
missing, bad, expired, revoked token    401     ``/problems/unauthorized``
token's role lacks the permission,      403     ``/problems/forbidden``
read-only token writing, or a dispute
of a source outside the token's scope
body over ``api_max_body_bytes``        413     ``/problems/too-large``
a body that is not JSON (its            415     ``/problems/unsupported-media-type``
``Content-Type``; ``deps.require_json``)
a JSON body that is not UTF-8           400     ``/problems/bad-request``
too many failed authentications         429     ``/problems/too-many-requests``
Redis/PostgreSQL unreachable, schema    503     ``/problems/unavailable``
not at head, a released ladder file
missing or edited (``LadderReleaseError``),
PostgreSQL read-only (a hot standby, a
failover in progress: ``DatabaseReadOnly``),
the SLA rollup not backfilled yet
(``RollupNotBackfilled``: ``code`` and
``action`` members name it and the command)
======================================  ======  ===========================

A released ladder file that is missing or edited is the deployment's fault, not the
request's: 503 (retry once the file is restored), never 422 (which a client may treat as
"drop this dispute").

422 documents carry ``errors: [{"field": ..., "message": ...}]`` naming each bad field
(``items[3].due_at`` for the 4th item of a batch), the first ``api_max_errors`` of them
(``error_count`` and ``errors_truncated`` say when more were found). An
``InvalidInput`` names its field as data where the value is read (``field``; an
``InvalidParameter`` its first parameter) and a batch item's position (``item``), never
words of its message (:func:`field_of`; ADR 0029). Messages name the
API's own parameters, never the CLI's flags (``from``, not ``--from``): the layers below
render nothing interface-specific.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from escalation.domain.errors import (
    ConflictError,
    DatabaseReadOnly,
    EscalationError,
    InvalidInput,
    InvalidItems,
    LadderReleaseError,
    NotFound,
    RollupNotBackfilled,
    SchemaNotAtHead,
    UnreadableRelease,
)
from escalation.logs import get_logger

MEDIA_TYPE = "application/problem+json"
_log = get_logger(__name__)

TITLES: dict[int, tuple[str, str]] = {
    400: ("/problems/bad-request", "Bad request"),
    401: ("/problems/unauthorized", "Missing, invalid, expired or revoked token"),
    403: ("/problems/forbidden", "The token's role does not allow this"),
    404: ("/problems/not-found", "Not found"),
    405: ("/problems/method-not-allowed", "Method not allowed"),
    409: ("/problems/conflict", "Conflict with the escalation's current state"),
    413: ("/problems/too-large", "Request too large"),
    415: ("/problems/unsupported-media-type", "The body is not JSON"),
    429: ("/problems/too-many-requests", "Too many failed authentications; retry later"),
    422: ("/problems/invalid-input", "Invalid input; nothing was written"),
    500: ("/problems/internal", "Internal error"),
    503: ("/problems/unavailable", "A backing service is unavailable"),
}

class ApiProblem(Exception):
    """An HTTP error the API raises itself (401, 403, ...)."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None,
                 **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers
        self.extra = extra


def field_of(exc: InvalidInput, fields: Sequence[str] = ()) -> str | None:
    """The request field an ``InvalidInput`` is about, from its ``field`` and ``item``
    (ADR 0029), or None: ``items[i].<field>`` for the i-th item of a batch. ``fields``
    restricts the answer to the fields of the request at hand (e.g. a query's
    parameters)."""
    field = exc.field if exc.field is not None and (not fields or exc.field in fields) else None
    if exc.item is None:
        return field
    return f"items[{exc.item}]" + ("" if field is None else f".{field}")


def message_of(exc: InvalidInput) -> str:
    """The message of an ``InvalidInput`` as the API shows it: a batch item's starts with
    ``items[i]: `` (JSON counts from 0; the layers below say ``request i + 1`` for people)."""
    return str(exc) if exc.item is None else f"items[{exc.item}]: {exc.detail}"


RETRY_AFTER_S = 5
"""``Retry-After`` (seconds) of a 503 that names no other wait: a backing service is down or
the schema or a ladder file is being fixed (a shed request says 1 s, ``edge``)."""


def problem(status: int, detail: str, instance: str | None = None,
            headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    """A problem+json response: ``type``, ``title``, ``status``, ``detail``, ``instance``.

    Every 503 carries ``Retry-After`` (:data:`RETRY_AFTER_S` unless ``headers`` names one).
    """
    if status == 503 and not any(k.lower() == "retry-after" for k in headers or {}):
        headers = {**(headers or {}), "Retry-After": str(RETRY_AFTER_S)}
    type_, title = TITLES.get(status, ("about:blank", "Error"))
    body: dict[str, Any] = {"type": type_, "title": title, "status": status, "detail": detail}
    if instance:
        body["instance"] = instance
    body.update(extra)
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def _loc(loc: Sequence[int | str]) -> str:
    parts = [p for p in loc if p not in ("body", "query", "path", "header")]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


def _validation_error(e: Mapping[str, Any]) -> dict[str, str]:
    """``{"field", "message"}`` of one schema error. A body that is not JSON names the
    ``body`` (pydantic's location is the character offset) and where parsing stopped."""
    loc = e.get("loc", ())
    if e.get("type") == "json_invalid":
        at = next((p for p in reversed(loc) if isinstance(p, int)), None)
        why = (e.get("ctx") or {}).get("error") or e.get("msg", "")
        where = f" at character {at}" if at is not None else ""
        return {"field": "body", "message": f"the body is not valid JSON{where}: {why}"}
    return {"field": _loc(loc), "message": str(e.get("msg", ""))}


def not_utf8(exc: UnicodeDecodeError) -> dict[str, str]:
    """``{"field": "body", "message"}`` for a JSON body whose bytes do not decode (RFC 8259
    section 8.1: JSON exchanged between systems is UTF-8): the offset (bytes from the start
    of the body) and value of the first byte that does not."""
    bad = exc.object[exc.start:exc.start + 1]
    byte = f" 0x{bad[0]:02x}" if bad else ""
    return {"field": "body",
            "message": f"the body is not UTF-8 (RFC 8259 section 8.1): byte{byte} at offset "
                       f"{exc.start} ({exc.reason}); send JSON encoded as UTF-8"}


def status_of(exc: EscalationError) -> int:
    """HTTP status of a domain error (see the module table)."""
    if isinstance(exc, LadderReleaseError):
        return 503  # the server's ladder files, not the request
    if isinstance(exc, InvalidInput):
        return 422
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, (SchemaNotAtHead, DatabaseReadOnly, RollupNotBackfilled)):
        # with Retry-After: the same request succeeds once a primary answers, or once the
        # deployment's step is done (db upgrade, report sla-refresh): not the request's fault
        return 503
    return 500


def unavailable_service(exc: BaseException) -> str:
    """``"redis"`` or ``"postgresql"``: which backing service an outage error came from (by
    the error's module, never by its text)."""
    return "redis" if type(exc).__module__.startswith("redis") else "postgresql"


def max_errors(request: Request) -> int:
    """``api_max_errors`` of the serving app (20 before the app has started)."""
    core = getattr(request.app.state, "core", None)
    return int(core.settings.api_max_errors) if core is not None else 20


def capped(errors: Sequence[Any], total: int, limit: int) -> dict[str, Any]:
    """The ``errors`` member of a 422 with at most ``limit`` entries; when some were left
    out, ``error_count`` (all of them) and ``errors_truncated: true`` say so."""
    out: dict[str, Any] = {"errors": list(errors[:limit])}
    if total > limit:
        out.update(error_count=total, errors_truncated=True)
    return out


def unreadable_ladder(release: UnreadableRelease) -> tuple[str, dict[str, Any]]:
    """The ``detail`` and extension members of the 503 for a request that needs released
    ``release.ladder@release.version``, which this server cannot read from its ladder
    directory: the ladder, version and fault as members (``ladder``, ``version``,
    ``reason``: missing / invalid / edited), the file and what to do in the detail, never a
    path on the server."""
    fault = {"missing": "is missing from", "invalid": "is invalid in",
             "edited": "differs from the release in"}[release.fault.value]
    detail = (f"ladder {release.ladder!r} version {release.version} is released but this "
              f"server cannot read it: {release.file} {fault} its ladder directory; "
              f"{release.advice()}. Escalations on other ladders and versions are "
              "served.")
    return detail, {"ladder": release.ladder, "version": release.version,
                    "reason": release.fault.value}


def install(app: FastAPI) -> None:
    """Register the exception handlers that turn every error into problem+json."""

    async def on_domain(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, EscalationError)  # noqa: S101 - registered for this class
        status = status_of(exc)
        extra: dict[str, Any] = {}
        message = str(exc)  # an InvalidParameter's str() spells parameters as the API does
        if isinstance(exc, LadderReleaseError) and exc.release is not None:
            message, extra = unreadable_ladder(exc.release)
        if isinstance(exc, RollupNotBackfilled):  # a client branches on the code (ADR 0029)
            extra.update(code=exc.code.value, action="escalation report sla-refresh")
        if status == 422 and isinstance(exc, InvalidInput):
            found = exc.errors if isinstance(exc, InvalidItems) else (exc,)
            errors = [{"field": field_of(e), "message": message_of(e)} for e in found]
            message = "; ".join(message_of(e) for e in found[:5])
            extra.update(capped(errors, len(errors), max_errors(request)))
        return problem(status, message, request.url.path, **extra)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)  # noqa: S101
        found = exc.errors()
        limit = max_errors(request)
        errors = [_validation_error(e) for e in found[:limit]]
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
        return problem(422, detail or "invalid request", request.url.path,
                       **capped(errors, len(found), limit))

    async def on_api(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiProblem)  # noqa: S101
        extra = dict(exc.extra)
        if isinstance(extra.get("errors"), list):
            extra.update(capped(extra["errors"], len(extra["errors"]), max_errors(request)))
        return problem(exc.status, exc.detail, request.url.path, exc.headers, **extra)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)  # noqa: S101
        extra: dict[str, Any] = dict(getattr(exc, "extra", {}))  # guard.Refused's
        if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
            error = not_utf8(exc.__cause__)  # FastAPI's "error parsing the body", by its cause
            return problem(400, error["message"], request.url.path, errors=[error])
        return problem(exc.status_code, str(exc.detail), request.url.path,
                       dict(exc.headers) if exc.headers else None, **extra)

    async def on_unavailable(request: Request, exc: Exception) -> JSONResponse:
        # the client learns which service, never its address or the driver's text (that
        # goes to the log, with the request id bound by the edge middleware)
        first = str(exc).strip().splitlines()
        service = unavailable_service(exc)
        _log.warning("api.backing_service_unavailable", service=service,
                     error=f"{type(exc).__name__}: {first[0] if first else ''}")
        return problem(503, f"backing service unavailable: {service} (retry later)",
                       request.url.path)

    import redis.exceptions
    import sqlalchemy.exc

    app.add_exception_handler(EscalationError, on_domain)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(ApiProblem, on_api)
    app.add_exception_handler(StarletteHTTPException, on_http)
    for cls in (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError):
        app.add_exception_handler(cls, on_unavailable)
