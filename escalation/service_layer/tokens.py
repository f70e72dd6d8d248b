"""Use cases: HTTP API bearer tokens -- create (shown once), list, revoke, authenticate.

A token is ``esc_`` + 43 URL-safe base64 characters (32 bytes from :mod:`secrets`, 256 bits).
Only its SHA-256 hex digest is stored (``api_tokens.token_sha256``): a 256-bit random secret
needs no slow password hash, since it cannot be guessed from a dictionary. Authentication
looks the digest up and compares it again with :func:`hmac.compare_digest` (constant time).
Roles and what each may do: ``escalation.domain.access``. A token may be scoped at creation
(``sources``: service tokens only; ``read_only``); see docs/adr/0011-http-hardening.md.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from escalation.domain.access import TokenInfo, check_name, check_scope, parse_role
from escalation.domain.errors import ConflictError, InvalidInput, NotFound
from escalation.domain.timeutil import require_aware
from escalation.ports import NewToken, TokenStore

TOKEN_PREFIX = "esc_"  # noqa: S105 - a public marker, not a secret
MAX_TTL_DAYS = 3660


def digest(secret: str) -> str:
    """SHA-256 hex digest of a token secret."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class CreateToken:
    """Create an API token (the command of :func:`create_token`).

    ``name``: unique, never reused (even revoked); ``role``: a role name
    (``escalation.domain.access.Role``); ``ttl_days``: days of validity, 1-3660;
    ``sources``: the dispute sources the token is limited to (None or empty = unscoped;
    service tokens only); ``read_only``: reads only.
    """

    name: str
    role: str
    ttl_days: int
    sources: list[str] | tuple[str, ...] | None = None
    read_only: bool = False


def create_token(cmd: CreateToken, store: TokenStore) -> tuple[str, TokenInfo]:
    """Create the token ``cmd`` describes (:class:`CreateToken`). Returns (secret, info); the
    secret is not stored and cannot be shown again.

    Raises:
        InvalidInput: bad name, role, ttl or source scope. ConflictError: the name exists
            (even revoked).
    """
    check_name(cmd.name)
    r = parse_role(cmd.role)
    scope = check_scope(r, cmd.sources)
    if not 1 <= cmd.ttl_days <= MAX_TTL_DAYS:
        raise InvalidInput(f"--ttl-days must be 1-{MAX_TTL_DAYS}, got {cmd.ttl_days}")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    info = store.insert(NewToken(cmd.name, r, digest(secret),
                                 store.now() + timedelta(days=cmd.ttl_days),
                                 sources=scope, read_only=cmd.read_only))
    return secret, info


def revoke_token(store: TokenStore, name: str) -> TokenInfo:
    """Revoke ``name`` now. Raises NotFound (no such token), ConflictError (already revoked)."""
    before = {t.name: t for t in store.all()}.get(name)
    if before is None:
        raise NotFound(f"no token named {name!r}")
    if before.revoked_at is not None:
        raise ConflictError(f"token {name!r} was already revoked at "
                            f"{before.revoked_at.isoformat()}; nothing changed")
    info = store.revoke(name, store.now())
    if info is None:  # pragma: no cover - rows are never deleted
        raise NotFound(f"no token named {name!r}")
    return info


def well_formed(secret: str) -> bool:
    """Whether ``secret`` could be a token at all (``esc_`` prefix, at most 128 characters):
    anything else is refused without a lookup."""
    return secret.startswith(TOKEN_PREFIX) and len(secret) <= 128


def find(store: TokenStore, secret: str) -> TokenInfo | None:
    """The stored token whose secret is ``secret`` (in any state), or None: malformed, or no
    such digest (the digest is compared again in constant time)."""
    if not well_formed(secret):
        return None
    d = digest(secret)
    found = store.by_digest(d)
    if found is None:
        return None
    info, stored = found
    return info if hmac.compare_digest(stored, d) else None


def authenticate(store: TokenStore, secret: str, now: datetime) -> TokenInfo | None:
    """The active token whose secret is ``secret`` at ``now`` (aware), else None.

    None for an unknown, malformed, expired or revoked token (the caller answers 401 without
    saying which, so a caller learns nothing about other tokens).
    """
    require_aware(now, "now")
    info = find(store, secret)
    return info if info is not None and info.state(now) == "active" else None


def dispute_in_scope(info: TokenInfo, dispute_id: UUID, external_id: str | None) -> bool:
    """Whether a token may name the dispute ``dispute_id`` (its projection's external id
    ``external_id``): always for an unscoped token; for a scoped one, when the dispute is
    the one one of its sources calls ``external_id`` (``UUID5(source:external_id)``, the id
    a create by source and external id gives it). A dispute created by UUID alone belongs to
    no source."""
    if info.sources is None:
        return True
    if external_id is None:
        return False
    from escalation.service_layer.importer import stable_dispute_id

    return any(stable_dispute_id(external_id, s)[0] == dispute_id for s in info.sources)


def source_refusal(info: TokenInfo, source: str | None) -> str | None:
    """Why a scoped token may not name a dispute of ``source`` (None: it may). A dispute
    named without a source (by UUID) in a create is refused to a scoped token."""
    if info.sources is None or (source is not None and source in info.sources):
        return None
    allowed = ", ".join(info.sources)
    if source is None:
        return (f"token {info.name!r} is limited to sources {allowed}: name the dispute by "
                "source and external_id")
    return f"token {info.name!r} is limited to sources {allowed}, not {source!r}"
