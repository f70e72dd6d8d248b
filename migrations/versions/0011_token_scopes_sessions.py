"""Token scopes and console sessions (docs/adr/0011-http-hardening.md).

``api_tokens.sources`` (NULL = unscoped: every dispute) and ``api_tokens.read_only``;
``console_sessions``: one row per console sign-in, keyed by the SHA-256 hex digest of its
random id (the cookie value, never stored), with the token it was opened with, its last
request, its absolute end and when and why it ended (NULL while live).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Add the token scope columns; create ``console_sessions``."""
    op.add_column("api_tokens", sa.Column("sources", ARRAY(sa.Text)))
    op.add_column("api_tokens", sa.Column("read_only", sa.Boolean, nullable=False,
                                          server_default=sa.text("false")))
    op.create_check_constraint(
        op.f("ck_api_tokens_sources_for_service"), "api_tokens",
        "sources IS NULL OR (role = 'service' AND cardinality(sources) >= 1)")
    op.create_table(
        "console_sessions",
        sa.Column("id_sha256", sa.Text, nullable=False),
        sa.Column("token_name", sa.Text, nullable=False),
        sa.Column("created_at", TZ, nullable=False,
                  server_default=sa.text("clock_timestamp()")),
        sa.Column("last_seen_at", TZ, nullable=False,
                  server_default=sa.text("clock_timestamp()")),
        sa.Column("expires_at", TZ, nullable=False),
        sa.Column("ended_at", TZ),
        sa.Column("ended_why", sa.Text),
        sa.PrimaryKeyConstraint("id_sha256", name=op.f("pk_console_sessions")),
        sa.ForeignKeyConstraint(["token_name"], ["api_tokens.name"],
                                name=op.f("fk_console_sessions_token_name_api_tokens")),
    )
    op.create_index(op.f("ix_console_sessions_token_name"), "console_sessions",
                    ["token_name"])


def downgrade() -> None:
    """Drop ``console_sessions`` and the scope columns."""
    op.drop_index(op.f("ix_console_sessions_token_name"), table_name="console_sessions")
    op.drop_table("console_sessions")
    op.drop_constraint(op.f("ck_api_tokens_sources_for_service"), "api_tokens")
    op.drop_column("api_tokens", "read_only")
    op.drop_column("api_tokens", "sources")
