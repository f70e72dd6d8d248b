"""The SLA rollup's counts per UTC hour, kept with its rows.

The SLA report's counts (per ladder and tier, per span of a trend, per duration bucket)
were aggregated from every rollup row of the window (ADR 0033): linear in the window, about
1 s for 91 days of a 2,000,000-dispute ledger. ``sla_rollup_hours`` holds, per UTC hour of
``at`` and per (ladder, tier, kind, state, name, duration bucket), how many rollup rows
there are. The adapter keeps it in the transaction that replaces a dispute's rows (what was
removed subtracted, what was written added), so a window's counts are a sum over its whole
hours plus the rows of the hours it cuts (a window or span bound not on the hour).
``state`` and ``name`` are '' where the rollup row has none; ``bucket`` is the stay
duration's ``width_bucket`` over the stored uppers (1 h, 4 h, 24 h, 2 d, 5 d, 10 d), -1
without a duration. The table is filled here from the rows already stored.

The exact median and p95 still read the window's ended stays: a partial index on ``at``
carrying ``(ladder, tier, duration_s)`` holds only those rows.

Frozen DDL: does not import ``escalation.adapters.tables``.

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | Sequence[str] | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UPPERS = "ARRAY[3600, 14400, 86400, 172800, 432000, 864000]::float8[]"


def upgrade() -> None:
    """Create the table and the ended stays' index; count the rows already stored."""
    op.create_table(
        "sla_rollup_hours",
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ladder", sa.Text, nullable=False),
        sa.Column("tier", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("name", sa.Text(collation="C"), nullable=False),
        sa.Column("bucket", sa.SmallInteger, nullable=False),
        sa.Column("n", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("hour", "ladder", "tier", "kind", "state", "name", "bucket"),
    )
    op.execute(
        "INSERT INTO sla_rollup_hours (hour, ladder, tier, kind, state, name, bucket, n) "
        "SELECT date_trunc('hour', at, 'UTC'), ladder, tier, kind, COALESCE(state, ''), "
        f"COALESCE(name, ''), COALESCE(width_bucket(duration_s, {_UPPERS}), -1), count(*) "
        "FROM sla_rollup GROUP BY 1, 2, 3, 4, 5, 6, 7")
    op.create_index("ix_sla_rollup_ended", "sla_rollup", ["at"],
                    postgresql_include=["ladder", "tier", "duration_s"],
                    postgresql_where=sa.text("duration_s IS NOT NULL"))


def downgrade() -> None:
    """Drop them (derived data: the rollup rows hold every count)."""
    op.drop_index("ix_sla_rollup_ended", "sla_rollup")
    op.drop_table("sla_rollup_hours")
