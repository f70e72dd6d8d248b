"""The SLA rollup's backfill resumes: ``sla_rollup_state.backfill_after``.

A full refresh (the first, or one asked for) folds every dispute in order of dispute id, one
committed transaction per chunk; each chunk's transaction writes the chunk's rollup rows and
records the last dispute id it covered in ``backfill_after``. While it is set the backfill
is unfinished: the next refresh continues after it instead of starting again (ADR 0033).
NULL once the backfill has finished.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import UUID

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the backfill's resume point."""
    op.add_column("sla_rollup_state",
                  sa.Column("backfill_after", UUID(as_uuid=True), nullable=True))


def downgrade() -> None:
    """Drop it."""
    op.drop_column("sla_rollup_state", "backfill_after")
