"""Reliability: recurring maintenance runs, recorded in PostgreSQL (docs/reliability.md).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create ``maintenance_runs`` (one row per job; the last occurrence claimed and run)."""
    op.create_table(
        "maintenance_runs",
        sa.Column("job", sa.Text, nullable=False),
        sa.Column("last_occurrence", TZ, nullable=False),
        sa.Column("last_run_at", TZ, nullable=False),
        sa.Column("last_status", sa.Text, nullable=False),
        sa.Column("runs", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("missed", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("last_leader", sa.Text, nullable=False),
        sa.Column("details", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.PrimaryKeyConstraint("job", name=op.f("pk_maintenance_runs")),
        sa.CheckConstraint("last_status IN ('running', 'ok', 'failed')",
                           name=op.f("ck_maintenance_runs_status_known")),
    )


def downgrade() -> None:
    """Drop ``maintenance_runs``."""
    op.drop_table("maintenance_runs")
