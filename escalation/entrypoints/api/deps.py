"""Shared dependencies: the wired ``bootstrap.App``, the dispute named by the path, and the
refusal of query parameters a route does not declare."""

from __future__ import annotations

import difflib
import json
import types
from typing import Annotated, Any, Union, get_args, get_origin
from uuid import UUID

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.convertors import Convertor, register_url_convertor

from escalation.bootstrap import App
from escalation.domain.access import TokenInfo
from escalation.domain.errors import NotFound
from escalation.entrypoints.api.problems import ApiProblem
from escalation.service_layer.disputes import resolve_dispute
from escalation.service_layer.tokens import dispute_in_scope, source_refusal


def get_core(request: Request) -> App:
    """The process's ``bootstrap.App`` (built in the lifespan)."""
    core: App = request.app.state.core
    return core


Core = Annotated[App, Depends(get_core)]


def dispute_from_path(request: Request) -> UUID:
    """The dispute of ``/escalations/{dispute_id}`` or
    ``/sources/{source}/escalations/{external_id}``, within the token's scope.

    A source-scoped token (ADR 0011) naming another source in the path gets 403; naming by
    UUID a dispute that is not one of its sources' gets the 404 of a dispute that does not
    exist (a scoped caller learns nothing of other sources' disputes).

    Raises:
        InvalidInput (422): not a UUID, bad source name, over-long external id.
        ApiProblem (403): the path's source is outside the token's scope.
        NotFound (404): the UUID's dispute is outside the token's scope (or absent).
    """
    p: dict[str, Any] = request.path_params
    token: TokenInfo | None = getattr(request.state, "token", None)
    if "dispute_id" in p:
        did = resolve_dispute(p["dispute_id"])[0]
        if token is not None and token.scoped:
            got = get_core(request).store.get(did)
            if got is None or not dispute_in_scope(token, did, got[0].external_id):
                raise NotFound(f"no escalation recorded for dispute {did}")
        return did
    if token is not None:
        why = source_refusal(token, p["source"])
        if why is not None:
            raise ApiProblem(403, why)
    return resolve_dispute(source=p["source"], external_id=p["external_id"])[0]


Dispute = Annotated[UUID, Depends(dispute_from_path)]


DISPUTE_SUFFIXES = ("cancel", "pause", "resume", "actions", "resolve", "audit", "case-file")
"""The sub-resources after a dispute path (``.../{external_id}/cancel``). A last segment of
a source's external id equal to one of them is read as that sub-resource: such a dispute is
reached by its UUID (``/v1/escalations/{dispute_id}``)."""


class ExternalIdConvertor(Convertor[str]):
    """The ``{external_id:external_id}`` path parameter: one or more path segments, so that a
    source system's id containing ``/`` (``ACC/2026/17``, sent percent-encoded as
    ``ACC%2F2026%2F17``, which the server decodes before routing) reaches its dispute. It
    stops before a trailing ``/<sub-resource>`` of :data:`DISPUTE_SUFFIXES`."""

    regex = r"(?:(?!/(?:%s)$).)+" % "|".join(DISPUTE_SUFFIXES)  # noqa: UP031 - a regex

    def convert(self, value: str) -> str:
        """The id as decoded from the path (no further decoding)."""
        return value

    def to_string(self, value: str) -> str:
        """The id as written into a path (``url_path_for``)."""
        return value


register_url_convertor("external_id", ExternalIdConvertor())


def path_parameters(path: str) -> dict[str, Any]:
    """``openapi_extra`` declaring the dispute path parameters of ``path`` (they are read by
    :func:`dispute_from_path`, which FastAPI cannot introspect)."""
    if "{dispute_id}" in path:
        params = [{"name": "dispute_id", "in": "path", "required": True,
                   "description": "Dispute UUID.",
                   "schema": {"type": "string", "format": "uuid"},
                   "example": "6f1c2f4e-8a51-4c7e-9a53-2d1b7e0c9f10"}]
    else:
        params = [{"name": "source", "in": "path", "required": True,
                   "description": "Source system name (letters, digits, _.-; 1-64).",
                   "schema": {"type": "string"}, "example": "cfpb"},
                  {"name": "external_id", "in": "path", "required": True,
                   "description": "The source system's dispute id (1-200 characters).",
                   "schema": {"type": "string"}, "example": "2026-0417-0093"}]
    return {"parameters": params}


_SEQUENCES = (list, tuple, set, frozenset)
_DECLARED = "_escalation_declared_query"
"""Attribute on each route caching its query parameters in declaration order, and those of
them that take one value only (kept on the route itself: a cache keyed by ``id(route)`` could
hand a later app's route, allocated at a freed id, another route's names)."""


def _query_fields(dependant: Dependant) -> list[Any]:
    """The query parameters of a route's endpoint and of every dependency it uses."""
    fields = list(dependant.query_params)
    for sub in dependant.dependencies:
        fields += _query_fields(sub)
    return fields


def _takes_many(annotation: Any) -> bool:
    """Whether a parameter's type is a list (``?tag=a&tag=b``), possibly optional."""
    options = (get_args(annotation)
               if get_origin(annotation) in (Union, types.UnionType) else (annotation,))
    return any(get_origin(a) in _SEQUENCES or a in _SEQUENCES for a in options)


def _declared_query(route: APIRoute) -> tuple[tuple[str, ...], frozenset[str]]:
    got: tuple[tuple[str, ...], frozenset[str]] | None = getattr(route, _DECLARED, None)
    if got is None:
        fields = _query_fields(route.dependant)
        names = tuple(dict.fromkeys(f.alias for f in fields))  # as sent: "from", not "since"
        single = frozenset(f.alias for f in fields
                           if not _takes_many(f.field_info.annotation))
        got = (names, single)
        setattr(route, _DECLARED, got)
    return got


def refuse_unknown_query(request: Request) -> None:
    """Refuse a query parameter the route does not declare, or a one-value parameter given
    more than once: 422 naming each and listing the accepted ones.

    Without this, FastAPI ignores what it was not told about: ``GET /v1/audit?dispute=<id>``
    (for ``dispute_id``) answered the whole ledger with 200, and ``?dispute_id=a&dispute_id=b``
    filtered by ``b`` alone -- the wrong record set, handed over as if it were the one asked
    for. Added to every API router (``app.create_app``), so a new route is covered without a
    word; it runs after ``guard.Guard`` has authenticated the request (an anonymous client
    learns nothing of a route's parameters), and lists at most ``api_max_errors`` errors.

    Raises:
        ApiProblem (422): ``errors[].field`` is each offending parameter; ``accepted`` lists
            the route's own.
    """
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not request.query_params:
        return
    accepted, single = _declared_query(route)
    errors = []
    for name in dict.fromkeys(request.query_params.keys()):
        if name not in accepted:
            near = difflib.get_close_matches(name, accepted, n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]}?)" if near else ""
            errors.append({"field": name, "message": f"unknown query parameter {name!r}{hint}"})
        elif name in single and len(request.query_params.getlist(name)) > 1:
            errors.append({"field": name,
                           "message": f"query parameter {name!r} given more than once; it "
                                      "takes one value"})
    if not errors:
        return
    takes = (f"accepts only: {', '.join(accepted)}" if accepted
             else "accepts no query parameters")
    detail = "; ".join(e["message"] for e in errors)
    raise ApiProblem(422, f"{detail}. {request.method} {route.path_format} {takes}",
                     errors=errors, accepted=list(accepted))


async def refuse_duplicate_keys(request: Request) -> None:
    """Refuse a JSON body in which one object names a key twice: 422 naming the key.

    JSON parsers keep the last value (RFC 8259 section 4 leaves it to the implementation):
    ``{"external_id": "D1", "external_id": "D2"}`` created D2, a record other than the one a
    reader of the request would see. Runs after FastAPI has parsed the body (the bytes are
    read once; a body that is not JSON was already refused) and before the route writes.

    Raises:
        ApiProblem (422): ``errors[].field`` is the repeated key.
    """
    if request.method not in ("POST", "PUT", "PATCH"):
        return
    raw = await request.body()
    if not raw:
        return
    repeated: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(items)
        if len(obj) != len(items):
            seen: set[str] = set()
            for k, _ in items:
                if k in seen:
                    repeated.append(k)
                seen.add(k)
        return obj

    try:
        json.loads(raw, object_pairs_hook=pairs)
    except ValueError:
        return  # not JSON: FastAPI's own refusal names where it broke
    if repeated:
        key = repeated[0]
        message = (f"key {key!r} given more than once in one JSON object; each field "
                   "takes one value")
        raise ApiProblem(422, f"body: {message}",
                         errors=[{"field": key, "message": message}])


def require_json(request: Request) -> None:
    """Refuse a body that is not JSON on a route that reads one: 415 naming the
    ``Content-Type`` sent (RFC 9110 section 15.5.16), instead of the schema error FastAPI
    gives bytes it was not told are JSON.

    A body is JSON when its ``Content-Type`` is ``application/json`` or
    ``application/<anything>+json`` (parameters such as ``charset`` ignored), or when the
    header is absent (read as JSON, as FastAPI does). An empty body is not checked: the
    routes whose body is optional (cancel, pause) take none. Runs before the body is
    validated, after the token's permission (``auth.authorize``).

    Raises:
        ApiProblem (415): ``errors[].field`` is ``Content-Type``.
    """
    if request.method not in ("POST", "PUT", "PATCH"):
        return
    kind = request.headers.get("content-type")
    if kind is None or request.headers.get("content-length") == "0":
        return
    media = kind.split(";", 1)[0].strip().lower()
    if media == "application/json" or (media.startswith("application/")
                                       and media.endswith("+json")):
        return
    message = (f"the body must be JSON (Content-Type: application/json), got "
               f"Content-Type {media or kind!r}")
    raise ApiProblem(415, message, errors=[{"field": "Content-Type", "message": message}])
