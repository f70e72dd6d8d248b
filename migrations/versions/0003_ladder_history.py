"""Ladder migration history: one row per ``escalation ladder apply`` run.

See docs/ladder-migrations.md, "ladder_release and ladder_history".

Revision ID: 0003
Revises: 0002

Frozen DDL (does not import ``escalation.adapters.tables``). A partial unique index allows
at most one ``running`` apply per ladder version; ``last_dispute_id`` and
``redis_synced_through`` are the resume points of a crashed apply.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import UUID

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)


def _count(name: str) -> sa.Column[int]:
    return sa.Column(name, sa.Integer, nullable=False, server_default=sa.text("0"))


def upgrade() -> None:
    """Create ladder_history."""
    op.create_table(
        "ladder_history",
        sa.Column("run_id", sa.BigInteger, sa.Identity(), nullable=False),
        sa.Column("ladder", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("checksum", sa.Text, nullable=False),
        sa.Column("plan_hash", sa.Text, nullable=False),
        sa.Column("applied_by", sa.Text, nullable=False),
        sa.Column("started_at", TZ, nullable=False),
        sa.Column("finished_at", TZ),
        sa.Column("status", sa.Text, nullable=False),
        _count("planned"),
        _count("migrated"),
        _count("replanned"),
        _count("skipped"),
        _count("blocked"),
        _count("not_owner"),
        sa.Column("last_dispute_id", UUID(as_uuid=True)),
        sa.Column("redis_synced_through", UUID(as_uuid=True)),
        sa.Column("error", sa.Text),
        sa.PrimaryKeyConstraint("run_id", name="pk_ladder_history"),
        sa.CheckConstraint(
            "status IN ('running', 'done', 'failed')", name=op.f("ck_ladder_history_status_known")
        ),
    )
    op.create_index("ix_ladder_history_ladder_version", "ladder_history", ["ladder", "version"])
    op.create_index(
        "uq_ladder_history_one_running",
        "ladder_history",
        ["ladder", "version"],
        unique=True,
        postgresql_where=sa.text("status = 'running'"),
    )


def downgrade() -> None:
    """Drop ladder_history (the ledger keeps every LADDER_MIGRATED row)."""
    op.drop_index("uq_ladder_history_one_running", table_name="ladder_history")
    op.drop_index("ix_ladder_history_ladder_version", table_name="ladder_history")
    op.drop_table("ladder_history")
