"""PostgreSQL store of HTTP API token digests (table ``api_tokens``, revision 0007)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
import sqlalchemy.exc

from escalation.adapters.tables import api_tokens
from escalation.domain.access import Role, TokenInfo
from escalation.domain.errors import ConflictError

_T = api_tokens


def _info(row: Mapping[Any, Any]) -> TokenInfo:
    return TokenInfo(
        name=row["name"], role=Role(row["role"]), created_at=row["created_at"],
        expires_at=row["expires_at"], revoked_at=row["revoked_at"],
    )


class PostgresTokenStore:
    """Implements ``escalation.ports.TokenStore`` on an engine."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def insert(self, name: str, role: Role, digest: str, expires_at: datetime) -> TokenInfo:
        """Store a new token. Raises ConflictError if ``name`` (or the digest) exists."""
        stmt = _T.insert().values(
            name=name, role=role.value, token_sha256=digest, expires_at=expires_at
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
        """Set ``revoked_at`` if not yet set; the row (revoked or not) or None."""
        with self._engine.begin() as conn:
            conn.execute(
                _T.update().where(_T.c.name == name, _T.c.revoked_at.is_(None))
                .values(revoked_at=at)
            )
            row = conn.execute(sa.select(_T).where(_T.c.name == name)).mappings().first()
        return None if row is None else _info(row)

    def now(self) -> datetime:
        """The database clock, ``clock_timestamp()`` (aware UTC)."""
        with self._engine.connect() as conn:
            value: datetime = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
        return value
