"""The typed HTTP contract: named operation ids and the error responses every operation
declares, added to the OpenAPI document FastAPI generates (``app.create_app`` installs
:func:`install`; docs/openapi.json is its output, docs/api.md its prose).

What the server sends and the document therefore declares, per operation:

==========  =====================================================  =======================
status      when                                                   operations
==========  =====================================================  =======================
400         a JSON body that is not UTF-8 (RFC 8259 section 8.1)   those with a body
401         no, an invalid, expired or revoked bearer token        all but the probes
                                                                   (``/readyz``: a token
                                                                   sent and bad)
403         the token's role, read-only flag or source scope       ``/v1/...``, ``/metrics``
405         a method the path does not serve (``Allow`` header)    all
413         a body over ``api_max_body_bytes``                     those with a body
415         a body that is not JSON (``Content-Type`` not          those with a body
            ``application/json`` or ``application/*+json``)
422         a body or parameter against the schema or a domain     ``/v1/...``, ``/metrics``
            rule, an undeclared query parameter
429         repeated failed authentication (``Retry-After``)       all but ``/healthz``,
                                                                   ``/livez``
503         load shedding at ``api_max_in_flight``, a backing      all but ``/healthz``,
            service down (``Retry-After``)                         ``/livez``
==========  =====================================================  =======================

Every 4xx and 5xx is ``application/problem+json`` (RFC 9457) and nothing else, except the
503 of ``/readyz``, which is the readiness document itself (``application/json``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_REF = "#/components/schemas/Problem"

OPERATION_IDS: dict[str, str] = {
    "create": "createEscalation",
    "create_batch": "createEscalationBatch",
    "get_by_id": "getEscalation",
    "get_by_external_id": "getEscalationByExternalId",
    "cancel_by_id": "cancelEscalation",
    "cancel_by_external_id": "cancelEscalationByExternalId",
    "pause_by_id": "pauseEscalation",
    "pause_by_external_id": "pauseEscalationByExternalId",
    "resume_by_id": "resumeEscalation",
    "resume_by_external_id": "resumeEscalationByExternalId",
    "record_action_by_id": "recordAction",
    "record_action_by_external_id": "recordActionByExternalId",
    "resolve_by_id": "resolveEscalation",
    "resolve_by_external_id": "resolveEscalationByExternalId",
    "audit_trail_by_id": "getAuditTrail",
    "audit_trail_by_external_id": "getAuditTrailByExternalId",
    "case_file_by_id": "getCaseFile",
    "case_file_by_external_id": "getCaseFileByExternalId",
    "search": "searchAudit",
    "case_file_search": "searchCaseFile",
    "ladders": "listLadders",
    "ladder_version": "getLadderVersion",
    "sla_report": "getSlaReport",
    "metrics": "getMetrics",
    "healthz": "getHealth",
    "livez": "getLiveness",
    "readyz": "getReadiness",
}
"""Route name (the endpoint function's, or the ``name=`` it was added with) -> operation id."""

_DESCRIPTIONS: dict[int, str] = {
    400: "The body is not UTF-8 (`/problems/bad-request`; `errors[0].field` = `body`, the "
         "offset of the first byte that does not decode).",
    401: "Missing, invalid, expired or revoked bearer token (`/problems/unauthorized`, "
         "`WWW-Authenticate: Bearer`).",
    403: "The token's role, read-only flag or source scope does not allow this "
         "(`/problems/forbidden`).",
    404: "Not found (`/problems/not-found`).",
    405: "The path does not serve this method (`/problems/method-not-allowed`; `Allow` "
         "lists the methods it serves).",
    409: "Conflict with the escalation's current state (`/problems/conflict`).",
    413: "The body is larger than `api_max_body_bytes` (`/problems/too-large`); it was not "
         "read.",
    415: "The body is not JSON: `Content-Type` must be `application/json` (or "
         "`application/*+json`) (`/problems/unsupported-media-type`).",
    422: "Invalid input, nothing was written (`/problems/invalid-input`; `errors` names "
         "each field).",
    429: "Too many failed authentications from this client or with this token "
         "(`/problems/too-many-requests`; `Retry-After`).",
    503: "Over `api_max_in_flight` requests in flight, or a backing service unavailable "
         "(`/problems/unavailable`; `Retry-After`).",
}
_HEADERS: dict[int, dict[str, Any]] = {
    405: {"Allow": {"description": "The methods the path serves.", "required": True,
                    "schema": {"type": "string"}}},
    429: {"Retry-After": {"description": "Seconds to wait.", "required": True,
                          "schema": {"type": "integer", "minimum": 1}}},
    503: {"Retry-After": {"description": "Seconds to wait.", "required": True,
                          "schema": {"type": "integer", "minimum": 1}}},
}
PARAMETER_FORMATS: dict[str, str] = {"dispute_id": "uuid", "from": "date-time",
                                     "to": "date-time"}
"""Formats of parameters the routes read as text (the domain parses them, with its own
messages): a dispute UUID, an instant with its offset."""
_PUBLIC = frozenset({"/healthz", "/livez"})
_BODY_METHODS = frozenset({"post", "put", "patch"})


def operation_id(route: APIRoute) -> str:
    """The operation id of a route: :data:`OPERATION_IDS`, else its name in lowerCamelCase
    (a route added without an entry still gets a readable id, never FastAPI's
    ``<name>_<path>_<method>``)."""
    got = OPERATION_IDS.get(route.name)
    if got is not None:
        return got
    head, *rest = route.name.split("_")
    return head + "".join(p.capitalize() for p in rest)


def statuses_of(path: str, method: str) -> tuple[int, ...]:
    """The error statuses the server may send for ``method`` (lower case) on ``path`` (see
    the module table), besides those the route declares itself."""
    if path in _PUBLIC:
        return (405,)
    if path == "/readyz":
        return (401, 405, 429)
    out = [401, 403, 405, 422, 429, 503]
    if method in _BODY_METHODS:
        out += [400, 413, 415]
    return tuple(sorted(out))


def _problem_response(status: int, description: str | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description or _DESCRIPTIONS.get(status, "Error"),
        "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": PROBLEM_REF}}}}
    if status in _HEADERS:
        response["headers"] = _HEADERS[status]
    return response


def _format(parameter: dict[str, Any]) -> None:
    """Declare the format (:data:`PARAMETER_FORMATS`) of a text parameter's string schema."""
    fmt = PARAMETER_FORMATS.get(parameter.get("name", ""))
    schema = parameter.get("schema", {})
    if fmt is None:
        return
    for branch in [schema, *schema.get("anyOf", [])]:
        if branch.get("type") == "string":
            branch["format"] = fmt


def type_errors(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (an OpenAPI document FastAPI generated) with every 4xx/5xx response of every
    operation as problem+json only, and the statuses of :func:`statuses_of` added. The 503
    of ``/readyz`` is left as declared (a readiness document)."""
    for path, operations in doc.get("paths", {}).items():
        for method, op in operations.items():
            for parameter in op.get("parameters", []):
                _format(parameter)
            responses: dict[str, Any] = op.setdefault("responses", {})
            for status in statuses_of(path, method):
                responses.setdefault(str(status), {})
            for code, response in list(responses.items()):
                if not code.isdigit() or int(code) < 400:
                    continue
                if path == "/readyz" and code == "503":
                    response.setdefault("headers", _HEADERS[503])
                    continue
                described = response.get("description")
                keep = described if described and described != "Error" else None
                if int(code) == 422 and keep == "Validation Error":
                    keep = None
                responses[code] = _problem_response(int(code), keep)
            op["responses"] = dict(sorted(responses.items()))
    schemas = doc.get("components", {}).get("schemas", {})
    # FastAPI's own 422 body, referenced by nothing once every 422 is a problem document
    for unused in ("HTTPValidationError", "ValidationError"):
        used = json.dumps({k: v for k, v in schemas.items() if k != unused})
        if unused in schemas and f"/{unused}\"" not in json.dumps(doc["paths"]) + used:
            schemas.pop(unused)
    return doc


def install(app: FastAPI) -> None:
    """Serve :func:`type_errors` of FastAPI's document as ``app.openapi()`` (computed once:
    FastAPI's own ``openapi()`` caches its document in ``app.openapi_schema``, which is
    completed in place)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            type_errors(generate())
        assert app.openapi_schema is not None  # noqa: S101 - set by generate()
        return app.openapi_schema

    setter: Callable[..., Any] = setattr
    setter(app, "openapi", openapi)
