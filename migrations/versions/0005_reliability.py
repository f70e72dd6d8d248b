"""Reliability: notifications, dead letters, maintenance runs (issue 7).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Placeholder kept so the revision chain is fixed; filled in by its issue's work."""


def downgrade() -> None:
    """Nothing to undo yet."""
