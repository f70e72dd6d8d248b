"""Use cases: console sessions -- sign in (a token exchanged for a session), check, sign out.

A session id is ``ses_`` + 43 URL-safe base64 characters (256 random bits). The console
cookie holds it; PostgreSQL holds only its SHA-256 digest (``console_sessions``), so the
cookie is never a bearer token (the API refuses anything not starting ``esc_`` before any
lookup) and a copied cookie dies with the session: at sign-out, after ``idle_s`` without a
request, at the absolute end ``lifetime_s`` after sign-in, or when its token is revoked or
expires (docs/adr/0011-http-hardening.md). Every sign-in issues a new id: an id known before
sign-in (a planted cookie) is never promoted. A live session's id is rotated: the first check
at least ``rotate_s`` seconds after the id was issued replaces it with a new one (the caller
sends it to the browser), the old id is accepted ``grace_s`` seconds more (requests of the
same page load already on their way) and then never again; the absolute end stays that of
the sign-in.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from escalation.domain.access import TokenInfo
from escalation.ports import SessionStore

SESSION_PREFIX = "ses_"


@dataclass(frozen=True, slots=True)
class Checked:
    """A live session found by :func:`check`.

    ``token``: its token. ``new_id``: the id that replaced the one checked (send it to the
    browser), or None. ``cache_s``: how long, in seconds, a process may take the id checked
    (or ``new_id`` when set) as live without asking again: never past the instant the id is
    due for rotation, and 0 for an id already rotated away (it lives only in its grace)."""

    token: TokenInfo
    new_id: str | None
    cache_s: float


def _new_id() -> str:
    return SESSION_PREFIX + secrets.token_urlsafe(32)


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
    session_id = _new_id()
    store.start(session_digest(session_id), token.name, lifetime_s)
    return session_id


def check(store: SessionStore, session_id: str, idle_s: float, rotate_s: float,
          grace_s: float) -> Checked | None:
    """The live session ``session_id`` (now marked seen), or None.

    An id issued ``rotate_s`` seconds ago or more is rotated here: ``new_id`` replaces it
    and the old id is refused once ``grace_s`` seconds have passed. The absolute end does not
    move. Of two requests rotating the same id at once, one rotates; the other is served in
    the grace with ``new_id`` None (the browser gets the new id from the first)."""
    if not well_formed(session_id):
        return None
    digest = session_digest(session_id)
    seen = store.touch(digest, idle_s, grace_s)
    if seen is None:
        return None
    if seen.rotated_ago_s is not None:
        return Checked(seen.token, None, 0.0)
    if seen.age_s < rotate_s:
        return Checked(seen.token, None, rotate_s - seen.age_s)
    new_id = _new_id()
    if store.rotate(digest, session_digest(new_id)):
        return Checked(seen.token, new_id, rotate_s)
    return Checked(seen.token, None, 0.0)


def sign_out(store: SessionStore, session_id: str) -> bool:
    """End the session now (server-side: the id stops working on every worker within the
    session cache time). False if it was not live."""
    if not well_formed(session_id):
        return False
    return store.end(session_digest(session_id), "signed_out")
