"""The access ports: HTTP API token digests and console sessions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from escalation.domain.access import Role, TokenInfo


@dataclass(frozen=True, slots=True)
class NewToken:
    """A token row to store (``TokenStore.insert``).

    ``digest``: SHA-256 hex of the secret (the secret itself is never stored);
    ``expires_at``: aware, database clock; ``sources``: the dispute sources the token is
    limited to (None = unscoped); ``read_only``: reads only.
    """

    name: str
    role: Role
    digest: str
    expires_at: datetime
    sources: tuple[str, ...] | None = None
    read_only: bool = False


class TokenStore(Protocol):
    """Where token digests live (adapter: ``adapters.token_store.PostgresTokenStore``)."""

    def insert(self, token: NewToken) -> TokenInfo:
        """Store a new token. Raises ConflictError if its name exists."""
        ...

    def by_digest(self, digest: str) -> tuple[TokenInfo, str] | None:
        """(token, stored digest) for a digest, or None."""
        ...

    def all(self) -> list[TokenInfo]:
        """Every token, by name."""
        ...

    def revoke(self, name: str, at: datetime) -> TokenInfo | None:
        """Set ``revoked_at`` (once) and end the token's console sessions; None if no such
        name."""
        ...

    def now(self) -> datetime:
        """The database clock (aware UTC): expiry is judged by one clock."""
        ...


@dataclass(frozen=True, slots=True)
class SessionSeen:
    """A console session id found live by ``SessionStore.touch``.

    ``token``: the session's token. ``age_s``: seconds since this id was issued (at sign-in
    or at its last rotation), database clock. ``rotated_ago_s``: None while the id is the
    session's current one; else seconds since it was rotated away (accepted only within the
    grace the caller passed)."""

    token: TokenInfo
    age_s: float
    rotated_ago_s: float | None


class SessionStore(Protocol):
    """Console sessions by id digest (adapter: ``adapters.token_store``). Every time is
    the database clock; a session lives while it is not ended, was seen within the idle
    timeout, is younger than its absolute lifetime and its token is active. A rotation
    gives the session a new id digest and keeps its absolute end."""

    def start(self, digest: str, token_name: str, lifetime_s: float) -> None:
        """Store a new session of ``token_name`` ending at the latest ``lifetime_s`` s on."""
        ...

    def touch(self, digest: str, idle_s: float, grace_s: float) -> SessionSeen | None:
        """The live session of ``digest`` (and mark it seen now), or None (unknown, ended,
        idle longer than ``idle_s``, past its lifetime, token revoked or expired). An id
        rotated away less than ``grace_s`` seconds ago is still found (``rotated_ago_s``)."""
        ...

    def rotate(self, digest: str, new_digest: str) -> bool:
        """Atomically end the live id ``digest`` (``rotated``) and store ``new_digest`` for
        the same token with the same absolute end. False (nothing written) if ``digest`` was
        not live: another request rotated or ended it first."""
        ...

    def end(self, digest: str, why: str) -> bool:
        """End a session (``why``: ``signed_out``, ``replaced``); False if it was not live."""
        ...
