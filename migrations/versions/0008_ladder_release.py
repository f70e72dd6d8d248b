"""Ladder releases: a ladder version goes live only once released (``ladder release``).

Revision ID: 0008
Revises: 0005

Frozen DDL (does not import ``escalation.adapters.tables``). ``ladder_release`` holds one row
per released ``(ladder, version)`` with the SHA-256 checksum of the file as released, who
released it and why; enqueue pins the newest released version and workers decide only with
a released file whose checksum still matches (docs/adr/0004-ladder-release.md).
``ladder_history.reason`` records why an apply was run (e.g. a change ticket).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create ``ladder_release``; add ``ladder_history.reason``."""
    op.create_table(
        "ladder_release",
        sa.Column("ladder", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("checksum", sa.Text, nullable=False),
        sa.Column("released_at", TZ, nullable=False),
        sa.Column("released_by", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False, server_default=sa.text("''")),
        sa.PrimaryKeyConstraint("ladder", "version", name="pk_ladder_release"),
        sa.CheckConstraint("version >= 1", name=op.f("ck_ladder_release_version_positive")),
    )
    op.add_column("ladder_history", sa.Column("reason", sa.Text, nullable=False,
                                              server_default=sa.text("''")))


def downgrade() -> None:
    """Drop ``ladder_release`` and ``ladder_history.reason``."""
    op.drop_column("ladder_history", "reason")
    op.drop_table("ladder_release")
