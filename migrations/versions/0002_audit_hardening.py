"""Audit hardening: partitions, roles, checkpoints (issue 5).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Placeholder kept so the revision chain is fixed; filled in by its issue's work."""


def downgrade() -> None:
    """Nothing to undo yet."""
