"""Checkpoints store only the heads that changed since the previous checkpoint (ADR 0035).

* ``audit_checkpoint.heads_complete``: the checkpoint stores every head it seals (true on
  every checkpoint sealed before this revision, and on a first checkpoint) or only the heads
  that changed since the checkpoint before it (false).
* ``audit_checkpoint_head.removed``: the chain's head is no longer sealed from this
  checkpoint on (its row repeats the head last sealed), for a chain that left the ledger
  (retention) between two checkpoints.
* ``ix_audit_checkpoint_head_chain`` on ``(dispute_id, checkpoint_id)``: the heads sealed
  by checkpoint k are, per chain, the row of the newest checkpoint <= k, from the newest
  complete checkpoint <= k on (``adapters.checkpoints``).

Existing checkpoints stay readable as they are (each holds all its heads). Downgrading
refuses once a checkpoint stores only its changed heads: the older schema would read it as
holding all of them (the tables are append-only, so nothing is rewritten).

Frozen DDL: does not import ``escalation.adapters.tables``.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | Sequence[str] | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the columns (existing rows: complete checkpoints, no removals) and the index."""
    op.add_column("audit_checkpoint", sa.Column(
        "heads_complete", sa.Boolean, nullable=False, server_default=sa.true()))
    op.add_column("audit_checkpoint_head", sa.Column(
        "removed", sa.Boolean, nullable=False, server_default=sa.false()))
    op.create_index("ix_audit_checkpoint_head_chain", "audit_checkpoint_head",
                    ["dispute_id", "checkpoint_id"])


def downgrade() -> None:
    """Drop them, unless a checkpoint already stores only its changed heads."""
    op.execute("""
        DO $$
        BEGIN
          IF EXISTS (SELECT 1 FROM audit_checkpoint WHERE NOT heads_complete) THEN
            RAISE EXCEPTION 'checkpoints storing only their changed heads exist: '
              'the schema before revision 0020 cannot read them';
          END IF;
        END
        $$
    """)
    op.drop_index("ix_audit_checkpoint_head_chain", "audit_checkpoint_head")
    op.drop_column("audit_checkpoint_head", "removed")
    op.drop_column("audit_checkpoint", "heads_complete")
