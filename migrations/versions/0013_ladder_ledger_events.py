"""Ladder releases, baselines and apply runs as ledger events.

Frozen DDL (does not import ``escalation.adapters.tables``). The ledger admits the events of
a ladder version's own chain (LADDER_RELEASED, LADDER_BASELINE, LADDER_APPLIED,
LADDER_APPLY_FAILED), and ``ladder_release`` holds that chain's head: ``chain_id``,
``last_seq``, ``last_hash``, ``chain_created_at`` (all NULL for a release recorded before
this revision; docs/adr/0012-ladder-events-on-the-ledger.md).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import BYTEA, UUID

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)
_LADDER_EVENTS = ("LADDER_RELEASED", "LADDER_BASELINE", "LADDER_APPLIED", "LADDER_APPLY_FAILED")
_CONSTRAINT = "ck_escalation_audit_event_known"
_WHOLE = ("(chain_id IS NULL) = (last_seq IS NULL) AND (chain_id IS NULL) = (last_hash IS NULL)"
          " AND (chain_id IS NULL) = (chain_created_at IS NULL)")


def _events() -> list[str]:
    """The events the ledger's CHECK constraint admits now (extended, not restated: another
    revision of this series may have added events of its own)."""
    definition = op.get_bind().execute(sa.text(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conname = :name AND conrelid = 'escalation_audit'::regclass"),
        {"name": _CONSTRAINT}).scalar_one()
    return re.findall(r"'([A-Z_]+)'", str(definition))


#: The roles that run ``audit verify`` without owning the tables (migration 0002 creates them).
_READERS = "escalation_app, escalation_auditor"


def _constrain(events: Sequence[str]) -> None:
    listed = ", ".join(f"'{e}'" for e in events)
    op.execute(f"ALTER TABLE escalation_audit DROP CONSTRAINT {_CONSTRAINT}")
    op.execute(f"ALTER TABLE escalation_audit ADD CONSTRAINT {_CONSTRAINT} "
               f"CHECK (event IN ({listed}))")


def upgrade() -> None:
    """Admit the ladder events; add the chain head columns to ``ladder_release``."""
    events = _events()
    _constrain([*events, *(e for e in _LADDER_EVENTS if e not in events)])
    op.add_column("ladder_release", sa.Column("chain_id", UUID(as_uuid=True)))
    op.add_column("ladder_release", sa.Column("last_seq", sa.BigInteger))
    op.add_column("ladder_release", sa.Column("last_hash", BYTEA))
    op.add_column("ladder_release", sa.Column("chain_created_at", TZ))
    op.create_check_constraint(op.f("ck_ladder_release_chain_head_whole"), "ladder_release", _WHOLE)
    op.create_unique_constraint(op.f("uq_ladder_release_chain_id"), "ladder_release", ["chain_id"])
    # verify and the seal read the ladder chains' heads: the roles that verify must see them
    op.execute(f"GRANT SELECT ON ladder_release TO {_READERS}")


def downgrade() -> None:
    """Drop the head columns and restore the older event list (refused by PostgreSQL while a
    ladder event is on the ledger: the ledger is append-only)."""
    op.drop_constraint(op.f("uq_ladder_release_chain_id"), "ladder_release", type_="unique")
    op.drop_constraint(op.f("ck_ladder_release_chain_head_whole"), "ladder_release", type_="check")
    op.execute(f"REVOKE SELECT ON ladder_release FROM {_READERS}")
    for column in ("chain_created_at", "last_hash", "last_seq", "chain_id"):
        op.drop_column("ladder_release", column)
    _constrain([e for e in _events() if e not in _LADDER_EVENTS])
