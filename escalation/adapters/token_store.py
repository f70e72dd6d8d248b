"""PostgreSQL store of HTTP API token digests (table ``api_tokens``, revisions 0007 and
0011: scopes) and of console sessions (``console_sessions``, revision 0011)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
import sqlalchemy.exc

from escalation.adapters.tables import api_tokens, console_sessions
from escalation.domain.access import Role, TokenInfo
from escalation.domain.errors import ConflictError
from escalation.ports import NewToken, SessionSeen

_T = api_tokens
_S = console_sessions


def _seconds(value: float) -> Any:
    """An SQL interval of ``value`` seconds."""
    return sa.func.make_interval(0, 0, 0, 0, 0, 0, value)


def _info(row: Mapping[Any, Any]) -> TokenInfo:
    return TokenInfo(
        name=row["name"], role=Role(row["role"]), created_at=row["created_at"],
        expires_at=row["expires_at"], revoked_at=row["revoked_at"],
        sources=None if row["sources"] is None else tuple(row["sources"]),
        read_only=bool(row["read_only"]),
    )


class PostgresTokenStore:
    """Implements ``escalation.ports.TokenStore`` on an engine."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def insert(self, token: NewToken) -> TokenInfo:
        """Store a new token. Raises ConflictError if its name (or the digest) exists."""
        name = token.name
        stmt = _T.insert().values(
            name=name, role=token.role.value, token_sha256=token.digest,
            expires_at=token.expires_at,
            sources=None if token.sources is None else list(token.sources),
            read_only=token.read_only,
        ).returning(*_T.c)
        try:
            with self._engine.begin() as conn:
                return _info(conn.execute(stmt).mappings().one())
        except sqlalchemy.exc.IntegrityError:
            raise ConflictError(
                f"a token named {name!r} already exists (names are never reused)"
            ) from None

    def by_digest(self, digest: str) -> tuple[TokenInfo, str] | None:
        """(token, stored digest) for ``digest``, or None."""
        with self._engine.connect() as conn:
            row = conn.execute(
                sa.select(_T).where(_T.c.token_sha256 == digest)
            ).mappings().first()
        return None if row is None else (_info(row), str(row["token_sha256"]))

    def all(self) -> list[TokenInfo]:
        """Every token, ordered by name."""
        with self._engine.connect() as conn:
            rows = conn.execute(sa.select(_T).order_by(_T.c.name)).mappings()
            return [_info(r) for r in rows]

    def revoke(self, name: str, at: datetime) -> TokenInfo | None:
        """Set ``revoked_at`` if not yet set and end the token's live console sessions (one
        transaction); the row (revoked or not) or None."""
        with self._engine.begin() as conn:
            conn.execute(
                _T.update().where(_T.c.name == name, _T.c.revoked_at.is_(None))
                .values(revoked_at=at)
            )
            conn.execute(
                _S.update().where(_S.c.token_name == name, _S.c.ended_at.is_(None))
                .values(ended_at=at, ended_why="token_revoked"))
            row = conn.execute(sa.select(_T).where(_T.c.name == name)).mappings().first()
        return None if row is None else _info(row)

    def now(self) -> datetime:
        """The database clock, ``clock_timestamp()`` (aware UTC)."""
        with self._engine.connect() as conn:
            value: datetime = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
        return value


class PostgresSessionStore:
    """Implements ``escalation.ports.SessionStore`` on an engine (every time is
    ``clock_timestamp()``: one clock for idle and absolute expiry on every worker)."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def start(self, digest: str, token_name: str, lifetime_s: float) -> None:
        """Insert a live session ending ``lifetime_s`` seconds from now at the latest."""
        with self._engine.begin() as conn:
            conn.execute(_S.insert().values(
                id_sha256=digest, token_name=token_name,
                expires_at=sa.func.clock_timestamp() + _seconds(lifetime_s)))

    def touch(self, digest: str, idle_s: float, grace_s: float) -> SessionSeen | None:
        """One statement: the session if the id is live (not ended, or rotated away less
        than ``grace_s`` ago; seen within ``idle_s``, before its end, token neither revoked
        nor expired), marking it seen now."""
        now = sa.func.clock_timestamp()
        stmt = (
            _S.update()
            .where(_S.c.id_sha256 == digest,
                   sa.or_(_S.c.ended_at.is_(None),
                          sa.and_(_S.c.ended_why == "rotated",
                                  _S.c.ended_at > now - _seconds(grace_s))),
                   _S.c.last_seen_at > now - _seconds(idle_s),
                   _S.c.expires_at > now, _T.c.name == _S.c.token_name,
                   _T.c.revoked_at.is_(None), _T.c.expires_at > now)
            .values(last_seen_at=now)
            .returning(*_T.c,
                       sa.extract("epoch", now - _S.c.created_at).label("age_s"),
                       sa.extract("epoch", now - _S.c.ended_at).label("rotated_ago_s"))
        )
        with self._engine.begin() as conn:
            row = conn.execute(stmt).mappings().first()
        if row is None:
            return None
        ago = row["rotated_ago_s"]
        return SessionSeen(_info(row), float(row["age_s"]),
                           None if ago is None else float(ago))

    def rotate(self, digest: str, new_digest: str) -> bool:
        """One transaction: end the live id ``digest`` (``rotated``) and insert
        ``new_digest`` for its token with its ``expires_at`` (the absolute end stays)."""
        with self._engine.begin() as conn:
            old = conn.execute(
                _S.update().where(_S.c.id_sha256 == digest, _S.c.ended_at.is_(None))
                .values(ended_at=sa.func.clock_timestamp(), ended_why="rotated")
                .returning(_S.c.token_name, _S.c.expires_at)).mappings().first()
            if old is None:
                return False
            conn.execute(_S.insert().values(id_sha256=new_digest,
                                            token_name=old["token_name"],
                                            expires_at=old["expires_at"]))
        return True

    def end(self, digest: str, why: str) -> bool:
        """End a live session now; False if it was unknown or already ended."""
        with self._engine.begin() as conn:
            n = conn.execute(
                _S.update().where(_S.c.id_sha256 == digest, _S.c.ended_at.is_(None))
                .values(ended_at=sa.func.clock_timestamp(), ended_why=why)).rowcount
        return bool(n)
