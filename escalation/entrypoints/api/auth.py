"""Bearer-token authentication, role checks, the failed-authentication throttle and the
console session cache.

``Authorization: Bearer esc_...``: a missing, unknown, expired or revoked token gets 401
(with ``WWW-Authenticate: Bearer``), a token whose role lacks the route's permission (or a
read-only token on a write) 403; ``guard.Guard`` checks both before a request's body or
parameters are read. Verified tokens are remembered per process for ``api_token_cache_s``
seconds (default 5), so a revocation takes effect within that time on every worker; 0 checks
PostgreSQL on every request. Unknown tokens are remembered for ``api_negative_cache_s``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from escalation.domain.access import Permission, TokenInfo
from escalation.entrypoints.api.problems import ApiProblem
from escalation.ports import SessionStore, TokenStore
from escalation.service_layer import sessions
from escalation.service_layer.tokens import find, well_formed

bearer = HTTPBearer(auto_error=False, description="A token from `escalation token create`.")
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="escalation"'}


class TokenCache:
    """Verified tokens by secret for ``ttl_s`` seconds, and secrets found in no row
    (*unknown*) for ``negative_s`` seconds, at most ``max_unknown`` of them (thread-safe).

    A remembered unknown secret is refused from memory: a client repeating a guessed or
    mistyped token costs one PostgreSQL lookup per ``negative_s``, not one per request. An
    unknown secret stays unknown (secrets are made by ``token create`` only), so the negative
    cache never hides a valid token.
    """

    def __init__(self, store: TokenStore, ttl_s: float, negative_s: float = 0,
                 max_unknown: int = 50_000) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._negative_s = negative_s
        self._max_unknown = max_unknown
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, TokenInfo | None]] = {}
        self._unknown: OrderedDict[str, float] = OrderedDict()
        self.lookups = 0
        """PostgreSQL lookups made (for tests and diagnostics)."""

    def cached(self, secret: str) -> TokenInfo | Literal[False] | None:
        """From memory only: the active token for ``secret``, None (known bad, malformed or
        remembered unknown), or False (not remembered: call :meth:`check`)."""
        if not well_formed(secret):
            return None
        now = time.monotonic()
        with self._lock:
            gone = self._unknown.get(secret)
            if gone is not None:
                if now - gone < self._negative_s:
                    return None
                del self._unknown[secret]
            hit = self._seen.get(secret) if self._ttl_s > 0 else None
        if hit is None or now - hit[0] >= self._ttl_s:
            return False
        info = hit[1]
        return info if info is not None and info.state(datetime.now(UTC)) == "active" else None

    def check(self, secret: str) -> TokenInfo | None:
        """The active token for ``secret`` (see ``tokens.authenticate``), or None.
        Reads PostgreSQL unless remembered (blocking: call it from a thread)."""
        hit = self.cached(secret)
        if hit is not False:
            return hit
        now_mono = time.monotonic()
        self.lookups += 1
        found = find(self._store, secret)
        now = datetime.now(UTC)
        info = found if found is not None and found.state(now) == "active" else None
        with self._lock:
            if found is None and self._negative_s > 0:
                self._unknown[secret] = now_mono
                while len(self._unknown) > self._max_unknown:
                    self._unknown.popitem(last=False)
            if self._ttl_s > 0:
                if len(self._seen) > 10_000:
                    self._seen.clear()
                self._seen[secret] = (now_mono, info)
        return info


class Throttle:
    """Failed authentications counted per key (a client address, a token prefix) in fixed
    windows of ``window_s`` seconds: once a key has ``limit`` failures in its window, it is
    refused until the window ends (in memory, per process; at most ``max_keys`` keys, the
    least recently failed forgotten first). Thread-safe. ``clock`` gives the seconds the
    windows are measured in (monotonic; a test passes its own)."""

    def __init__(self, limit: int, window_s: float, max_keys: int = 100_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = limit
        self._window_s = window_s
        self._max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: OrderedDict[str, list[float]] = OrderedDict()

    def wait_s(self, *keys: str) -> float:
        """Seconds until every throttled key of ``keys`` may try again (0: none is)."""
        now = self._clock()
        wait = 0.0
        with self._lock:
            for key in keys:
                got = self._keys.get(key)
                if got is not None and got[1] >= self._limit:
                    wait = max(wait, got[0] + self._window_s - now)
        return wait

    def fail(self, *keys: str) -> None:
        """Count one failure against each key."""
        now = self._clock()
        with self._lock:
            for key in keys:
                got = self._keys.pop(key, None)
                if got is None or now - got[0] >= self._window_s:
                    got = [now, 0.0]
                got[1] += 1
                self._keys[key] = got  # most recent last
            while len(self._keys) > self._max_keys:
                self._keys.popitem(last=False)


def throttle_keys(client: str | None, secret: str | None) -> tuple[str, ...]:
    """The throttle keys of a request: its client address and, with a credential, the
    credential's first 12 characters (``esc_`` + 8: a repeated token from many addresses)."""
    keys = [f"addr:{client or '?'}"]
    if secret:
        keys.append(f"prefix:{secret[:12]}")
    return tuple(keys)


class SessionCache:
    """Live console sessions by id for up to ``ttl_s`` seconds (thread-safe); a miss reads
    PostgreSQL (``sessions.check``: one UPDATE that also marks the session seen, and
    rotates an id issued ``rotate_s`` seconds ago or more). An id is never cached past the
    instant it is due for rotation, so once any process rotates it no process serves it
    from memory; one rotated away is never cached (it lives only its ``grace_s``)."""

    def __init__(self, store: SessionStore, ttl_s: float, idle_s: float,
                 rotate_s: float, grace_s: float) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._idle_s = idle_s
        self._rotate_s = rotate_s
        self._grace_s = grace_s
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, TokenInfo]] = {}  # id -> (until, token)

    def check(self, session_id: str) -> tuple[TokenInfo, str | None] | None:
        """The token of the live session ``session_id`` and the id that replaced it (to
        send to the browser; None if not rotated now), or None (blocking)."""
        now = time.monotonic()
        with self._lock:
            hit = self._seen.get(session_id)
        if hit is not None and now < hit[0]:
            return hit[1], None
        got = sessions.check(self._store, session_id, self._idle_s, self._rotate_s,
                             self._grace_s)
        with self._lock:
            self._seen.pop(session_id, None)
            if got is None:
                return None
            ttl = min(self._ttl_s, got.cache_s)
            if ttl > 0:
                if len(self._seen) > 10_000:
                    self._seen.clear()
                self._seen[got.new_id or session_id] = (now + ttl, got.token)
        return got.token, got.new_id

    def sign_in(self, token: TokenInfo, lifetime_s: float, replacing: str | None) -> str:
        """A new session for ``token`` (see ``sessions.sign_in``); blocking."""
        if replacing:
            self.forget(replacing)
        return sessions.sign_in(self._store, token, lifetime_s, replacing)

    def sign_out(self, session_id: str) -> bool:
        """End the session server-side and forget it here; blocking."""
        self.forget(session_id)
        return sessions.sign_out(self._store, session_id)

    def forget(self, session_id: str) -> None:
        """Drop ``session_id`` from this process's memory."""
        with self._lock:
            self._seen.pop(session_id, None)


PERMISSION_ATTR = "_escalation_permission"
"""Attribute naming the permission of a :func:`require` dependency (read by ``guard``, which
checks it before the body is read)."""


def refusal(info: TokenInfo, permission: Permission) -> str | None:
    """Why ``info`` may not use a route needing ``permission`` (the 403 detail), or None."""
    if info.permits(permission):
        return None
    if info.read_only and permission is Permission.WRITE:
        return f"token {info.name!r} is read-only: it may not {permission.value}"
    return f"role {info.role.value!r} may not {permission.value} (token {info.name!r})"


def require(permission: Permission) -> Callable[..., Awaitable[TokenInfo]]:
    """A dependency: the request's token, which must hold ``permission``.

    The token was authenticated by ``guard.Guard`` before anything of the request was read
    (and the permission checked there too); this returns it, and checks again.

    Raises:
        ApiProblem 401: no authenticated token. ApiProblem 403: wrong role or read-only.
    """

    async def dependency(
        request: Request,
        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> TokenInfo:
        info: TokenInfo | None = getattr(request.state, "token", None)
        if info is None:
            raise ApiProblem(401, "missing bearer token (Authorization: Bearer <token>)",
                             CHALLENGE)
        why = refusal(info, permission)
        if why is not None:
            raise ApiProblem(403, why)
        request.state.actor = info.name
        return info

    setattr(dependency, PERMISSION_ATTR, permission)
    return dependency


def authorize(request: Request) -> None:
    """The first dependency of every API router: the matched route's permission, checked
    before any path or query parameter is validated (``guard.route_refusal``; a route with
    a body was checked before the body was read).

    Raises:
        ApiProblem 403: the token's role (or read-only) does not allow the route.
    """
    from escalation.entrypoints.api.guard import route_refusal

    why = route_refusal(request.scope)
    if why is not None:
        raise ApiProblem(403, why)


Writer = Annotated[TokenInfo, Depends(require(Permission.WRITE))]
StatusReader = Annotated[TokenInfo, Depends(require(Permission.STATUS))]
AuditReader = Annotated[TokenInfo, Depends(require(Permission.AUDIT))]
