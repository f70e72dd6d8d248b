"""PostgreSQL tables (SQLAlchemy 2 Core): the append-only ledger and the projection.

* ``escalation_audit``: the ledger, one row per event, append only. The database refuses
  UPDATE, DELETE and TRUNCATE (triggers created by the first Alembic revision, ``ENABLE
  ALWAYS``). Primary key ``(dispute_id, seq)``: recording is idempotent per dispute and
  sequence number; ``row_hash`` chains each row to the previous one of the same dispute
  (``escalation.domain.audit_hash``).
* ``escalation_state``: the projection, one mutable row per escalation: current tier, due
  time, chain head (``last_seq``/``last_hash``). It is updated in the same transaction as the
  ledger row, and its row lock serialises appends to one dispute's chain.

This module is the code's view of the schema; the Alembic revisions under ``migrations/``
create it (``tests/integration/test_migrations.py`` checks that both agree).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import BYTEA, JSONB, UUID

NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

LEDGER_EVENTS: tuple[str, ...] = (
    "ENQUEUED",
    "PROMOTED",
    "TERMINAL",
    "CANCELLED",
    "STUCK_MEMBER",
    "PAUSED",
    "RESUMED",
    "LADDER_MIGRATED",
    "WARNING",
    "DEAD_LETTERED",
    "PURGED",
)
"""Values allowed in ``escalation_audit.event`` (a CHECK constraint enforces the list)."""

STATUSES: tuple[str, ...] = ("pending", "paused", "terminal", "cancelled")

Money = sa.Numeric(18, 2, asdecimal=True)
TZ = sa.DateTime(timezone=True)

escalation_audit = sa.Table(
    "escalation_audit",
    metadata,
    sa.Column("dispute_id", UUID(as_uuid=True), nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("event", sa.Text, nullable=False),
    sa.Column("match_decision", sa.Text, nullable=False),
    sa.Column("from_tier", sa.Text),
    sa.Column("to_tier", sa.Text),
    sa.Column("ladder", sa.Text, nullable=False),
    sa.Column("ladder_version", sa.Integer, nullable=False),
    sa.Column("calendar_version", sa.Text),
    sa.Column("materiality", Money, nullable=False),
    sa.Column("due_at", TZ),
    sa.Column("next_due_at", TZ),
    sa.Column("regulatory_deadline", TZ),
    sa.Column("decided_at", TZ, nullable=False),
    sa.Column("recorded_at", TZ, nullable=False, server_default=sa.text("clock_timestamp()")),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("trace_id", sa.Text, nullable=False),
    sa.Column("source_hash", sa.Text, nullable=False),
    sa.Column("external_id", sa.Text),
    sa.Column("fence_token", sa.BigInteger),
    sa.Column("details", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("prev_hash", BYTEA, nullable=False),
    sa.Column("row_hash", BYTEA, nullable=False),
    sa.PrimaryKeyConstraint("dispute_id", "seq"),
    sa.CheckConstraint("seq >= 1", name="seq_positive"),
    sa.CheckConstraint(
        "event IN (" + ", ".join(f"'{e}'" for e in LEDGER_EVENTS) + ")", name="event_known"
    ),
    sa.CheckConstraint("octet_length(row_hash) = 32", name="row_hash_len"),
    sa.CheckConstraint("octet_length(prev_hash) = 32", name="prev_hash_len"),
    sa.Index(None, "decided_at"),
    sa.Index(None, "event", "decided_at"),
    sa.Index(None, "actor"),
)

escalation_state = sa.Table(
    "escalation_state",
    metadata,
    sa.Column("dispute_id", UUID(as_uuid=True), nullable=False),
    sa.Column("external_id", sa.Text),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("tier", sa.Text, nullable=False),
    sa.Column("ladder", sa.Text, nullable=False),
    sa.Column("ladder_version", sa.Integer, nullable=False),
    sa.Column("due_at", TZ),
    sa.Column("entered_tier_at", TZ, nullable=False),
    sa.Column("materiality", Money, nullable=False),
    sa.Column("source_hash", sa.Text, nullable=False),
    sa.Column("trace_id", sa.Text, nullable=False),
    sa.Column("regulatory_deadline", TZ),
    sa.Column("remaining_ms", sa.BigInteger),
    sa.Column("last_seq", sa.BigInteger, nullable=False),
    sa.Column("last_hash", BYTEA, nullable=False),
    sa.Column("created_at", TZ, nullable=False, server_default=sa.text("clock_timestamp()")),
    sa.Column("updated_at", TZ, nullable=False, server_default=sa.text("clock_timestamp()")),
    sa.PrimaryKeyConstraint("dispute_id"),
    sa.CheckConstraint(
        "status IN (" + ", ".join(f"'{s}'" for s in STATUSES) + ")", name="status_known"
    ),
    sa.CheckConstraint("(status = 'pending') = (due_at IS NOT NULL)", name="due_at_iff_pending"),
    sa.CheckConstraint("last_seq >= 1", name="last_seq_positive"),
    sa.Index(
        "ix_escalation_state_due_at_pending",
        "due_at",
        postgresql_where=sa.text("status = 'pending'"),
    ),
)
