"""Database identity stamp at binding; the ledger event SCHEDULE_RESET.

``deployment_binding.stamp``: a random value written by ``escalation db upgrade`` when it
binds the database (and again by ``db upgrade --restored``); with the database's OID it is the
identity the namespace's Redis records (docs/adr/0014-redis-ahead-of-the-ledger.md).
``SCHEDULE_RESET``: the row ``reconcile`` appends when it resets a Redis payload that was
ahead of the ledger (it names the decisions Redis held and the ledger lost).

The event list is extended from the constraint as it stands (the other revisions of this
series may have added events of their own), so this revision does not repeat their lists.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_EVENT = "SCHEDULE_RESET"
_CONSTRAINT = "ck_escalation_audit_event_known"


def _events() -> list[str]:
    """The events the ledger's CHECK constraint admits now."""
    definition = op.get_bind().execute(sa.text(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conname = :name AND conrelid = 'escalation_audit'::regclass"),
        {"name": _CONSTRAINT}).scalar_one()
    return re.findall(r"'([A-Z_]+)'", str(definition))


def _constrain(events: Sequence[str]) -> None:
    listed = ", ".join(f"'{e}'" for e in events)
    op.execute(f"ALTER TABLE escalation_audit DROP CONSTRAINT {_CONSTRAINT}")
    op.execute(f"ALTER TABLE escalation_audit ADD CONSTRAINT {_CONSTRAINT} "
               f"CHECK (event IN ({listed}))")


def upgrade() -> None:
    """Add ``deployment_binding.stamp``; admit SCHEDULE_RESET on the ledger."""
    op.add_column("deployment_binding", sa.Column("stamp", sa.Text))
    events = _events()
    if _EVENT not in events:
        _constrain([*events, _EVENT])


def downgrade() -> None:
    """Drop the column and the event (refused by PostgreSQL while a row uses it: the ledger
    is append-only)."""
    _constrain([e for e in _events() if e != _EVENT])
    op.drop_column("deployment_binding", "stamp")
