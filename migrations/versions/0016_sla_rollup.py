"""The SLA report's rollup: what each dispute contributes to the report, kept per dispute.

``sla_rollup`` holds, per dispute, its tier-stay events (entered, ended on time or late,
resolved: at the row's ``decided_at``, with the stay's duration) and its regulatory
deadlines (at the deadline, with its state as of the last refresh), as
``service_layer.sla_report.rollup_rows`` computes them. ``sla_rollup_state`` holds the
ledger watermark of the last refresh. A report over a window aggregates the rows of the
window instead of re-reading every chain (ADR 0033). The tables start empty: the first
refresh (``report sla``, or ``report sla-refresh``) folds the whole ledger once.
``escalation_audit.recorded_at`` gets an index: the refresh reads the disputes with a row
recorded since the watermark.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import UUID

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TZ = sa.DateTime(timezone=True)
_READERS = "escalation_auditor"


def upgrade() -> None:
    """Create the rollup tables and the ``recorded_at`` index."""
    op.create_table(
        "sla_rollup",
        sa.Column("dispute_id", UUID(as_uuid=True), nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("at", _TZ, nullable=False),
        sa.Column("ladder", sa.Text, nullable=False),
        sa.Column("tier", sa.Text, nullable=False),
        sa.Column("duration_s", sa.Float),
        sa.Column("state", sa.Text),
        sa.Column("name", sa.Text),
        sa.CheckConstraint(
            "kind IN ('entered', 'on_time', 'late', 'resolved', 'deadline')",
            name="ck_sla_rollup_kind_known"),
    )
    op.create_index("ix_sla_rollup_at", "sla_rollup", ["at"])
    op.create_index("ix_sla_rollup_dispute_id", "sla_rollup", ["dispute_id"])
    op.create_index("ix_sla_rollup_open_deadlines", "sla_rollup", ["at"],
                    postgresql_where=sa.text(
                        "kind = 'deadline' AND state IN ('at_risk', 'pending')"))
    op.create_table(
        "sla_rollup_state",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("watermark", _TZ, nullable=False),
        sa.Column("computed_at", _TZ, nullable=False),
        sa.Column("grace_s", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.CheckConstraint("id = 1", name="ck_sla_rollup_state_one_row"),
    )
    op.create_index("ix_escalation_audit_recorded_at", "escalation_audit", ["recorded_at"])
    op.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON sla_rollup, sla_rollup_state "
               "TO escalation_app")
    op.execute(f"GRANT SELECT ON sla_rollup, sla_rollup_state TO {_READERS}")


def downgrade() -> None:
    """Drop them (the rollup is derived: the ledger holds every figure)."""
    op.drop_index("ix_escalation_audit_recorded_at", "escalation_audit")
    op.drop_table("sla_rollup_state")
    op.drop_table("sla_rollup")
