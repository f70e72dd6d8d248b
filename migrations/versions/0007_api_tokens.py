"""HTTP API bearer tokens: stored as SHA-256 digests, never in clear.

One row per token: a unique ``name`` (the actor recorded on every ledger row a request with
the token causes), a ``role`` (service, compliance or admin), ``token_sha256`` (hex digest
of the random secret shown once at creation), ``created_at``, ``expires_at`` and
``revoked_at`` (NULL while valid). Rows are never deleted: a revoked token stays listed.

Revision ID: 0007
Revises: 0005
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create ``api_tokens``."""
    op.create_table(
        "api_tokens",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("role", sa.Text, nullable=False),
        sa.Column("token_sha256", sa.Text, nullable=False),
        sa.Column("created_at", TZ, nullable=False, server_default=sa.text("now()")),
        sa.Column("expires_at", TZ, nullable=False),
        sa.Column("revoked_at", TZ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_sha256", name=op.f("uq_api_tokens_token_sha256")),
        sa.CheckConstraint("role IN ('service', 'compliance', 'admin')",
                           name=op.f("ck_api_tokens_role_known")),
    )


def downgrade() -> None:
    """Drop ``api_tokens``."""
    op.drop_table("api_tokens")
