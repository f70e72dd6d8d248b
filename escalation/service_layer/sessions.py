"""Use cases: console sessions -- sign in (a token exchanged for a session), check, sign out.

A session id is ``ses_`` + 43 URL-safe base64 characters (256 random bits). The console
cookie holds it; PostgreSQL holds only its SHA-256 digest (``console_sessions``), so the
cookie is never a bearer token (the API refuses anything not starting ``esc_`` before any
lookup) and a copied cookie dies with the session: at sign-out, after ``idle_s`` without a
request, at the absolute end ``lifetime_s`` after sign-in, or when its token is revoked or
expires (docs/adr/0011-http-hardening.md). Every sign-in issues a new id: an id known before
sign-in (a planted cookie) is never promoted.
"""

from __future__ import annotations

import hashlib
import secrets

from escalation.domain.access import TokenInfo
from escalation.ports import SessionStore

SESSION_PREFIX = "ses_"


def session_digest(session_id: str) -> str:
    """SHA-256 hex digest of a session id (the stored key)."""
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def well_formed(session_id: str) -> bool:
    """Whether ``session_id`` could be a session id (prefix, at most 64 characters)."""
    return session_id.startswith(SESSION_PREFIX) and len(session_id) <= 64


def sign_in(store: SessionStore, token: TokenInfo, lifetime_s: float,
            replacing: str | None = None) -> str:
    """Open a session for an authenticated ``token`` (the caller checked it); end the
    session ``replacing`` (the cookie sent with the sign-in) if live. Returns the new id,
    shown to the browser only."""
    if replacing and well_formed(replacing):
        store.end(session_digest(replacing), "replaced")
    session_id = SESSION_PREFIX + secrets.token_urlsafe(32)
    store.start(session_digest(session_id), token.name, lifetime_s)
    return session_id


def check(store: SessionStore, session_id: str, idle_s: float) -> TokenInfo | None:
    """The token of the live session ``session_id`` (now marked seen), or None."""
    if not well_formed(session_id):
        return None
    return store.touch(session_digest(session_id), idle_s)


def sign_out(store: SessionStore, session_id: str) -> bool:
    """End the session now (server-side: the id stops working on every worker within the
    session cache time). False if it was not live."""
    if not well_formed(session_id):
        return False
    return store.end(session_digest(session_id), "signed_out")
