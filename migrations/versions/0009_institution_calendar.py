"""Institution time zone and calendar stored on each escalation (projection columns).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``institution_tz`` and ``institution_calendar`` to ``escalation_state`` (NULL for
    escalations recorded before: they count in the deployment's default)."""
    op.add_column("escalation_state", sa.Column("institution_tz", sa.Text))
    op.add_column("escalation_state", sa.Column("institution_calendar", sa.Text))


def downgrade() -> None:
    """Drop the two columns."""
    op.drop_column("escalation_state", "institution_calendar")
    op.drop_column("escalation_state", "institution_tz")
