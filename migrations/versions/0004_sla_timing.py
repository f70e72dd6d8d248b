"""SLA timing (docs/sla.md): a pre-breach warning is recorded at most once.

A unique partial index on the ledger's WARNING rows over (dispute_id, chain_created_at,
details->>'tier_seq', details->>'fraction'): the same warning (dispute, tier-entry seq,
fraction) can never get two ledger rows, whatever the workers do (docs/sla.md). The partition
key ``chain_created_at`` is part of the key, as PostgreSQL requires for a unique index on a
partitioned table; it is constant per dispute, so uniqueness per dispute is unchanged.

The columns SLA timing needs (``regulatory_deadline``, ``calendar_version`` on the ledger,
``remaining_ms`` on the projection) were created by 0001. This revision adds the projection's
``deadlines`` JSONB (every regulatory deadline of a multi-deadline ladder, e.g. CFPB 15/60
days; ``[["name", "ISO 8601 UTC"], ...]``).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ux_escalation_audit_warning_once"


def upgrade() -> None:
    """Create the unique index on WARNING rows; add ``escalation_state.deadlines``."""
    op.add_column("escalation_state", sa.Column("deadlines", JSONB, nullable=True))
    op.create_index(
        INDEX,
        "escalation_audit",
        ["dispute_id", "chain_created_at", sa.text("(details ->> 'tier_seq')"),
         sa.text("(details ->> 'fraction')")],
        unique=True,
        postgresql_where=sa.text("event = 'WARNING'"),
    )


def downgrade() -> None:
    """Drop the unique index and the ``deadlines`` column."""
    op.drop_index(INDEX, table_name="escalation_audit")
    op.drop_column("escalation_state", "deadlines")
