"""Bind a database to one deployment namespace (``escalation db upgrade`` records it).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``deployment_binding``: at most one row, the namespace this database serves."""
    op.create_table(
        "deployment_binding",
        sa.Column("id", sa.SmallInteger, nullable=False, server_default=sa.text("1")),
        sa.Column("namespace", sa.Text, nullable=False),
        sa.Column("bound_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployment_binding")),
        sa.CheckConstraint("id = 1", name=op.f("ck_deployment_binding_single_row")),
    )


def downgrade() -> None:
    """Drop ``deployment_binding``."""
    op.drop_table("deployment_binding")
