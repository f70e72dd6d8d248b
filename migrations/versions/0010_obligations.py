"""Obligations and resolution: events ACTION_RECORDED and RESOLVED, status resolved.

Also the projection column ``obligations`` (docs/adr/0010-obligations-and-resolution.md).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD_EVENTS = ("ENQUEUED", "PROMOTED", "TERMINAL", "CANCELLED", "STUCK_MEMBER", "PAUSED",
               "RESUMED", "LADDER_MIGRATED", "WARNING", "DEAD_LETTERED", "PURGED")
_NEW_EVENTS = (*_OLD_EVENTS, "ACTION_RECORDED", "RESOLVED")
_OLD_STATUSES = ("pending", "paused", "terminal", "cancelled")
_NEW_STATUSES = (*_OLD_STATUSES, "resolved")


def _in(column: str, values: Sequence[str]) -> str:
    return f"{column} IN (" + ", ".join(f"'{v}'" for v in values) + ")"


def _constraints(events: Sequence[str], statuses: Sequence[str]) -> None:
    op.execute("ALTER TABLE escalation_audit DROP CONSTRAINT ck_escalation_audit_event_known")
    op.execute("ALTER TABLE escalation_audit ADD CONSTRAINT ck_escalation_audit_event_known "
               f"CHECK ({_in('event', events)})")
    op.execute("ALTER TABLE escalation_state DROP CONSTRAINT ck_escalation_state_status_known")
    op.execute("ALTER TABLE escalation_state ADD CONSTRAINT ck_escalation_state_status_known "
               f"CHECK ({_in('status', statuses)})")


def upgrade() -> None:
    """Admit the two events and the status; add ``escalation_state.obligations``."""
    _constraints(_NEW_EVENTS, _NEW_STATUSES)
    op.add_column("escalation_state", sa.Column("obligations", JSONB))


def downgrade() -> None:
    """Drop the column and restore the older lists (refused by PostgreSQL while a row uses
    the new values: the ledger is append-only)."""
    op.drop_column("escalation_state", "obligations")
    _constraints(_OLD_EVENTS, _OLD_STATUSES)
