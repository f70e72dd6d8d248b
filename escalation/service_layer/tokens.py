"""Use cases: HTTP API bearer tokens -- create (shown once), list, revoke, authenticate.

A token is ``esc_`` + 43 URL-safe base64 characters (32 bytes from :mod:`secrets`, 256 bits).
Only its SHA-256 hex digest is stored (``api_tokens.token_sha256``): a 256-bit random secret
needs no slow password hash, since it cannot be guessed from a dictionary. Authentication
looks the digest up and compares it again with :func:`hmac.compare_digest` (constant time).
Roles and what each may do: ``escalation.domain.access``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

from escalation.domain.access import TokenInfo, check_name, parse_role
from escalation.domain.errors import ConflictError, InvalidInput, NotFound
from escalation.domain.timeutil import require_aware
from escalation.ports import TokenStore

TOKEN_PREFIX = "esc_"  # noqa: S105 - a public marker, not a secret
MAX_TTL_DAYS = 3660


def digest(secret: str) -> str:
    """SHA-256 hex digest of a token secret."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def create_token(
    store: TokenStore, name: str, role: str, ttl_days: int
) -> tuple[str, TokenInfo]:
    """Create a token valid for ``ttl_days`` days (1-3660). Returns (secret, info); the secret
    is not stored and cannot be shown again.

    Raises:
        InvalidInput: bad name, role or ttl. ConflictError: the name exists (even revoked).
    """
    check_name(name)
    r = parse_role(role)
    if not 1 <= ttl_days <= MAX_TTL_DAYS:
        raise InvalidInput(f"--ttl-days must be 1-{MAX_TTL_DAYS}, got {ttl_days}")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    info = store.insert(name, r, digest(secret), store.now() + timedelta(days=ttl_days))
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


def authenticate(store: TokenStore, secret: str, now: datetime) -> TokenInfo | None:
    """The active token whose secret is ``secret`` at ``now`` (aware), else None.

    None for an unknown, malformed, expired or revoked token (the caller answers 401 without
    saying which, so a caller learns nothing about other tokens).
    """
    require_aware(now, "now")
    if not secret.startswith(TOKEN_PREFIX) or len(secret) > 128:
        return None
    d = digest(secret)
    found = store.by_digest(d)
    if found is None:
        return None
    info, stored = found
    if not hmac.compare_digest(stored, d):
        return None
    return info if info.state(now) == "active" else None
