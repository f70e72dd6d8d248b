"""The SLA rollup's deadline rows keep their lateness and open miss, for the console.

The console's deadline lists and overview read the SLA rollup (docs/adr/0037).
``sla_rollup.late_s`` (seconds, as ``deadline_outcomes.outcomes_of`` gives it at the
refresh: 0 unless missed, NULL when not known or while the miss is still open, whose
lateness grows with the clock) and ``sla_rollup.open_miss`` (missed and no action, on time
or late, has ended it), both NULL on stay rows. Indexes on the deadline rows in the lists'
keyset order ``(at, dispute_id, name)``, ``name`` now in the "C" collation (code point
order, as the SLA report and Python sort names): every deadline, by state, and the open
misses.

The rows already stored lack both columns: the backfill is marked unfinished from the
first dispute (``backfill_after`` = the nil UUID, the watermark kept), so readers refuse
until ``escalation report sla-refresh`` has folded every dispute again (ADR 0034).

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEYS = "at, dispute_id, name"


def upgrade() -> None:
    """Add the columns and indexes; mark the backfill unfinished."""
    op.add_column("sla_rollup", sa.Column("late_s", sa.Float, nullable=True))
    op.add_column("sla_rollup", sa.Column("open_miss", sa.Boolean, nullable=True))
    op.execute('ALTER TABLE sla_rollup ALTER COLUMN name TYPE text COLLATE "C"')
    op.execute(f"CREATE INDEX ix_sla_rollup_deadline_keys ON sla_rollup ({_KEYS}) "
               "WHERE kind = 'deadline'")
    op.execute(f"CREATE INDEX ix_sla_rollup_deadline_state ON sla_rollup (state, {_KEYS}) "
               "WHERE kind = 'deadline'")
    op.execute(f"CREATE INDEX ix_sla_rollup_open_miss ON sla_rollup ({_KEYS}) "
               "WHERE kind = 'deadline' AND open_miss")
    op.execute("UPDATE sla_rollup_state "
               "SET backfill_after = '00000000-0000-0000-0000-000000000000' WHERE id = 1")


def downgrade() -> None:
    """Drop them (derived data: the ledger holds every figure)."""
    op.drop_index("ix_sla_rollup_open_miss", "sla_rollup")
    op.drop_index("ix_sla_rollup_deadline_state", "sla_rollup")
    op.drop_index("ix_sla_rollup_deadline_keys", "sla_rollup")
    op.execute("ALTER TABLE sla_rollup ALTER COLUMN name TYPE text COLLATE \"default\"")
    op.drop_column("sla_rollup", "open_miss")
    op.drop_column("sla_rollup", "late_s")
