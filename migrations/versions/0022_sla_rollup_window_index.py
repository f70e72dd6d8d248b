"""The SLA rollup's window index covers what the report's aggregates read.

The SLA report, its page and ``GET /v1/reports/sla`` aggregate the rollup rows of a window
(ADR 0033): counts per (ladder, tier), the stays' durations, the trend per span. Through
``ix_sla_rollup_at`` each row of the window was a heap fetch, and a refresh writes a
dispute's rows where the table has room, so the window's rows lie on nearly as many heap
pages as there are rows: on a 2,000,000-dispute ledger the SLA page read ~330,000 scattered
pages three times (3.1 s). ``ix_sla_rollup_window`` on ``(at)`` carries the columns those
aggregates read (``INCLUDE``): an index-only scan of the window's leaf pages, in order.

The rollup is rewritten per dispute on every refresh; the visibility map that lets an
index-only scan skip the heap is set by VACUUM. The table's autovacuum therefore runs after
1% of its rows changed or were inserted (the default, 20%, would leave the most recent
weeks, the ones read most, on pages not yet marked all-visible).

Frozen DDL: does not import ``escalation.adapters.tables``.

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0022"
down_revision: str | Sequence[str] | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COVERED = ["kind", "ladder", "tier", "state", "name", "duration_s"]


def upgrade() -> None:
    """Replace ``ix_sla_rollup_at`` by the covering index; autovacuum at 1%."""
    op.create_index("ix_sla_rollup_window", "sla_rollup", ["at"],
                    postgresql_include=_COVERED)
    op.drop_index("ix_sla_rollup_at", "sla_rollup")
    op.execute("ALTER TABLE sla_rollup SET (autovacuum_vacuum_scale_factor = 0.01, "
               "autovacuum_vacuum_insert_scale_factor = 0.01, "
               "autovacuum_analyze_scale_factor = 0.01)")


def downgrade() -> None:
    """Back to the plain index and the default autovacuum thresholds."""
    op.execute("ALTER TABLE sla_rollup RESET (autovacuum_vacuum_scale_factor, "
               "autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor)")
    op.create_index("ix_sla_rollup_at", "sla_rollup", ["at"])
    op.drop_index("ix_sla_rollup_window", "sla_rollup")
