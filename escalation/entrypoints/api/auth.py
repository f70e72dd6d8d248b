"""Bearer-token authentication and role checks, as FastAPI dependencies.

``Authorization: Bearer esc_...``: a missing, unknown, expired or revoked token gets 401
(with ``WWW-Authenticate: Bearer``), a token whose role lacks the route's permission 403.
Verified tokens are remembered per process for ``api_token_cache_s`` seconds (default 5), so
a revocation takes effect within that time on every worker; 0 checks PostgreSQL on every
request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from escalation.domain.access import Permission, TokenInfo, allowed
from escalation.entrypoints.api.problems import ApiProblem
from escalation.ports import TokenStore
from escalation.service_layer.tokens import authenticate

bearer = HTTPBearer(auto_error=False, description="A token from `escalation token create`.")
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="escalation"'}


class TokenCache:
    """Verified tokens by secret digest for ``ttl_s`` seconds (thread-safe)."""

    def __init__(self, store: TokenStore, ttl_s: float) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, TokenInfo | None]] = {}

    def cached(self, secret: str) -> TokenInfo | Literal[False] | None:
        """From memory only: the active token for ``secret``, None (known bad), or False
        (not remembered, or remembered too long ago: call :meth:`check`)."""
        if self._ttl_s <= 0:
            return False
        with self._lock:
            hit = self._seen.get(secret)
        if hit is None or time.monotonic() - hit[0] >= self._ttl_s:
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
        info = authenticate(self._store, secret, datetime.now(UTC))
        if self._ttl_s > 0:
            with self._lock:
                if len(self._seen) > 10_000:
                    self._seen.clear()
                self._seen[secret] = (now_mono, info)
        return info


def require(permission: Permission) -> Callable[..., Awaitable[TokenInfo]]:
    """A dependency: the request's token, which must hold ``permission``.

    Raises:
        ApiProblem 401: no/unknown/expired/revoked token. ApiProblem 403: wrong role.
    """

    async def dependency(
        request: Request,
        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> TokenInfo:
        if creds is None or creds.scheme.lower() != "bearer":
            raise ApiProblem(401, "missing bearer token (Authorization: Bearer <token>)",
                             _CHALLENGE)
        cache: TokenCache = request.app.state.tokens
        # a remembered token is checked on the event loop; otherwise PostgreSQL is read in
        # the thread pool
        hit = cache.cached(creds.credentials)
        info = (await run_in_threadpool(cache.check, creds.credentials) if hit is False
                else hit)
        if info is None:
            raise ApiProblem(401, "invalid, expired or revoked token", _CHALLENGE)
        if not allowed(info.role, permission):
            raise ApiProblem(403, f"role {info.role.value!r} may not {permission.value} "
                             f"(token {info.name!r})")
        request.state.actor = info.name
        return info

    return dependency


Writer = Annotated[TokenInfo, Depends(require(Permission.WRITE))]
StatusReader = Annotated[TokenInfo, Depends(require(Permission.STATUS))]
AuditReader = Annotated[TokenInfo, Depends(require(Permission.AUDIT))]
