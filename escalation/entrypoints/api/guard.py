"""The request guard: an ASGI middleware that runs before routing, parameter parsing and
body reading (docs/adr/0011-http-hardening.md).

For every request but the public probes (``/healthz``, ``/livez``; ``/readyz`` without an
``Authorization`` header) and the console (which has sessions of its own,
``console.routes``), in this order:

1. a failed-authentication throttle: a client address or token prefix that failed
   ``api_auth_fail_limit`` times within ``api_auth_fail_window_s`` gets 429 with
   ``Retry-After`` (no lookup at all) unless its token is remembered valid;
2. authentication: no bearer token, or an unknown, expired or revoked one, is 401 (the
   failure counted; an unknown token remembered, ``auth.TokenCache``);
3. authorisation: once routing has matched, the route's permission (``auth.require``) is
   checked before its body is read (:class:`_Body`) and before its parameters are
   validated (``auth.authorize``, the first dependency of every API router): 403;
4. the body, when the route first reads it: over ``api_max_body_bytes`` is 413 (by
   ``Content-Length`` before reading, or as soon as the bytes read pass it); a JSON body
   deeper than ``api_max_json_depth``, naming more than ``api_max_json_keys`` keys, or
   (``/v1/escalations/batch``) holding more than ``api_max_batch`` items is 422; then the
   route parses the body as it was sent.

So an anonymous client learns nothing of the schema (a malformed body, a bad UUID or an
unknown query parameter is 401 like any other request of it) and costs no body read. The
console's bodies (sign-in, sign-out forms) get the same size limit.
"""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from escalation.domain.access import Permission, TokenInfo
from escalation.entrypoints.api.auth import (
    CHALLENGE,
    PERMISSION_ATTR,
    Throttle,
    TokenCache,
    refusal,
    throttle_keys,
)
from escalation.entrypoints.api.problems import problem
from escalation.settings import Settings

PUBLIC_PATHS = frozenset({"/healthz", "/livez"})
"""Answered without a token (the load balancer's and Kubernetes' liveness probes)."""
OPTIONAL_TOKEN_PATHS = frozenset({"/readyz"})
"""Answered without a token (up or down only); a token, if sent, is checked and then shows
the details (``routes_ops.readyz``)."""
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_ROUTE_PERMISSION = "_escalation_route_permission"
_CLOSE = {"Connection": "close"}  # the rest of an over-large body is never read


class _TooMany(Exception):
    """A JSON body refused before the route: over a structural limit, or holding a number
    JSON cannot carry here (the message says which)."""


MAX_INT_DIGITS = 4_300
"""Longest integer literal a body may hold: CPython's default ``int`` conversion limit
(``sys.get_int_max_str_digits``); a longer one failed inside FastAPI's parser as a bare 400."""


def json_limits(raw: bytes, *, max_depth: int, max_keys: int,
                batch_limit: int | None = None) -> tuple[str, str] | None:
    """``(field, why)`` when a JSON body breaks a structural limit (``items`` for a batch
    over its length, else ``body``), or None (also for a body that is not JSON: the schema
    check names where it broke). ``NaN``, ``Infinity`` and ``-Infinity``, which Python's
    parser accepts but JSON has not, and an integer literal of more than
    :data:`MAX_INT_DIGITS` digits are refused here too, naming the ``body``.

    Counts object keys as the C decoder builds each object (stops at ``max_keys``), then
    measures the nesting depth (only when the bytes could nest deeper than ``max_depth``)
    and, with ``batch_limit``, the length of a top-level ``items`` array. Cost: one parse of
    at most ``api_max_body_bytes``.
    """
    count = 0

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal count
        count += len(items)
        if count > max_keys:
            raise _TooMany(f"the body names more than {max_keys} object keys "
                           "(api_max_json_keys)")
        return dict(items)

    def constant(name: str) -> Any:
        raise _TooMany(f"the body is not valid JSON: {name} is not a JSON number (RFC 8259 "
                       "section 6: NaN, Infinity and -Infinity have no JSON form); send "
                       "amounts as decimal strings")

    def integer(text: str) -> int:
        if len(text.lstrip("-")) > MAX_INT_DIGITS:
            raise _TooMany(f"the body holds a number of {len(text.lstrip('-'))} digits: at "
                           f"most {MAX_INT_DIGITS} are read (RFC 8259 section 6 lets a "
                           "parser limit the range of numbers)")
        return int(text)

    try:
        doc = json.loads(raw, object_pairs_hook=pairs, parse_constant=constant,
                         parse_int=integer)
    except _TooMany as exc:
        return "body", str(exc)
    except RecursionError:
        return "body", f"the body nests deeper than {max_depth} levels (api_max_json_depth)"
    except ValueError:
        return None
    if raw.count(b"[") + raw.count(b"{") > max_depth and _depth_over(doc, max_depth):
        return "body", f"the body nests deeper than {max_depth} levels (api_max_json_depth)"
    if batch_limit is not None and isinstance(doc, dict):
        items = doc.get("items")
        if isinstance(items, list) and len(items) > batch_limit:
            return "items", (f"items: at most {batch_limit} items per batch (api_max_batch), "
                             f"got {len(items)}")
    return None


def _depth_over(doc: Any, max_depth: int) -> bool:
    """Whether ``doc`` nests containers deeper than ``max_depth`` (iterative walk)."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        children: Any = (node.values() if isinstance(node, dict)
                         else node if isinstance(node, list) else ())
        if not children and not isinstance(node, (dict, list)):
            continue
        if depth > max_depth:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def route_refusal(scope: Scope) -> str | None:
    """Why the request's token may not use the route routing matched (``scope["route"]``:
    the permission of its ``auth.require`` dependency), or None (allowed, no token needed,
    or not yet routed)."""
    token: TokenInfo | None = scope.get("state", {}).get("token")
    route = scope.get("route")
    if token is None or route is None:
        return None
    if not hasattr(route, _ROUTE_PERMISSION):
        setattr(route, _ROUTE_PERMISSION, _find_permission(route))
    permission: Permission | None = getattr(route, _ROUTE_PERMISSION)
    return None if permission is None else refusal(token, permission)


def _find_permission(route: Any) -> Permission | None:
    dependant = getattr(route, "dependant", None)
    todo = [dependant] if dependant is not None else []
    while todo:
        d = todo.pop()
        got = getattr(d.call, PERMISSION_ATTR, None) if d.call is not None else None
        if got is not None:
            return Permission(got)
        todo.extend(d.dependencies)
    return None


class Refused(HTTPException):
    """A request refused while its body is first read (permission, size, structure): an
    ``HTTPException`` so that FastAPI's body reading passes it on to the problem handlers
    (``problems.install``); ``extra`` goes into the problem document."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None,
                 **extra: Any) -> None:
        super().__init__(status, detail, headers)
        self.extra = extra


class Guard:
    """The middleware (see the module docstring). Reads the app's ``state``: ``core``
    (settings), ``tokens`` (``auth.TokenCache``), ``throttle`` (``auth.Throttle``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Guard one request, then hand it to the app (its body read on first demand)."""
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        app = scope["app"]
        path: str = scope["path"]
        anonymous_ok = (path in OPTIONAL_TOKEN_PATHS
                        and not any(k == b"authorization" for k, _ in scope["headers"]))
        if not (path == "/console" or path.startswith("/console/") or anonymous_ok):
            info = await self._authenticate(scope, receive, send, app)
            if info is None:
                return
            scope.setdefault("state", {})["token"] = info
            scope["state"]["actor"] = info.name
        if scope["method"] in _BODY_METHODS:
            receive = _Body(scope, receive, app.state.core.settings)
        await self.app(scope, receive, send)

    async def _authenticate(self, scope: Scope, receive: Receive, send: Send,
                            app: Any) -> TokenInfo | None:
        """The request's active token, or None after answering 401 or 429."""
        headers = dict(scope["headers"])
        raw = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, secret = raw.partition(" ")
        secret = secret.strip()
        if scheme.lower() != "bearer" or not secret:
            await problem(401, "missing bearer token (Authorization: Bearer <token>)",
                          scope["path"], CHALLENGE)(scope, receive, send)
            return None
        tokens: TokenCache = app.state.tokens
        throttle: Throttle = app.state.throttle
        client = scope.get("client")
        keys = throttle_keys(client[0] if client else None, secret)
        hit = tokens.cached(secret)
        if hit is None or hit is False:
            wait = throttle.wait_s(*keys)
            if wait > 0:
                retry = str(max(1, math.ceil(wait)))
                await problem(429, "too many failed authentications from this client or "
                                   f"with this token; retry after {retry} s", scope["path"],
                              {"Retry-After": retry})(scope, receive, send)
                return None
        info = await run_in_threadpool(tokens.check, secret) if hit is False else hit
        if info is None:
            throttle.fail(*keys)
            await problem(401, "invalid, expired or revoked token", scope["path"],
                          CHALLENGE)(scope, receive, send)
            return None
        return info


class _Body:
    """The ``receive`` handed to the app: on the first call (routing done, so
    ``scope["route"]`` is known) it checks the route's permission, then reads the whole body
    within ``api_max_body_bytes`` and checks a JSON body's structure; later calls pass the
    client's messages through. Raises :class:`Refused` (403, 413, 422)."""

    def __init__(self, scope: Scope, receive: Receive, settings: Settings) -> None:
        self._scope = scope
        self._receive = receive
        self._settings = settings
        self._done = False

    async def __call__(self) -> Message:
        """The body as one message (first call), then the client's later messages."""
        if self._done:
            return await self._receive()
        self._done = True
        why = route_refusal(self._scope)
        if why is not None:
            raise Refused(403, why)
        body = await self._read()
        return {"type": "http.request", "body": body, "more_body": False}

    async def _read(self) -> bytes:
        limit = self._settings.api_max_body_bytes
        headers = dict(self._scope["headers"])
        too_big = (f"the body is larger than {limit} bytes (api_max_body_bytes); it was not "
                   "read")
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise Refused(413, too_big, _CLOSE)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self._receive()
            if message["type"] != "http.request":
                raise ClientDisconnect
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise Refused(413, too_big, _CLOSE)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        kind = headers.get(b"content-type", b"").decode("latin-1").lower()
        path: str = self._scope["path"]
        if body and path.startswith("/v1/") and (not kind or "json" in kind):
            s = self._settings
            over = json_limits(body, max_depth=s.api_max_json_depth,
                               max_keys=s.api_max_json_keys,
                               batch_limit=s.api_max_batch
                               if path.endswith("/escalations/batch") else None)
            if over is not None:
                field, why = over
                raise Refused(422, why, errors=[{"field": field, "message": why}])
        return body
