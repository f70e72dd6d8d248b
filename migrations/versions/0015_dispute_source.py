"""The source system's name of a dispute on its projection row.

A dispute named by (source, external id) has the id UUID5 of both; the name itself was not
kept. From this revision the ENQUEUED ledger row carries it in ``details.source`` (covered
by the row's hash) and ``escalation_state.source`` holds it, so the webhook event, the
console and the case file can show it beside the external id. Rows written earlier have no
name to recover (the UUID5 cannot be inverted): their ``source`` stays NULL.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the nullable ``escalation_state.source`` column (a catalog change: no rewrite)."""
    op.add_column("escalation_state", sa.Column("source", sa.Text, nullable=True))


def downgrade() -> None:
    """Drop the column (the names stay on the ENQUEUED rows' details)."""
    op.drop_column("escalation_state", "source")
