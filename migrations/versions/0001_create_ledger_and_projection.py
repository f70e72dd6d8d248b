"""Create the append-only ledger, its mutation-refusing triggers, and the projection.

Revision ID: 0001
Revises:
Create Date: 2026-01-01

The ledger ``escalation_audit`` refuses UPDATE and DELETE (row trigger) and TRUNCATE
(statement trigger). Both triggers are ``ENABLE ALWAYS``, so ``SET session_replication_role
= replica`` cannot bypass them (docs/audit.md, "Defence in depth"). Only a table owner or superuser
disabling the triggers can change rows; the hash chain makes that detectable.

The ledger is RANGE-partitioned by month on ``chain_created_at`` (the creation time of the
dispute's chain = ``escalation_state.created_at``, copied onto every row of the dispute), so
all rows of one dispute live in one partition and a retried append lands where the first
attempt did (docs/audit.md "Partitions"). There is no DEFAULT partition: monthly partitions
live in schema ``escalation_ledger_parts`` and are created ahead of time by the SQL function
``escalation_audit_ensure_partition(date)`` (which also adds the per-partition TRUNCATE
trigger, since statement triggers are not cloned to partitions); this revision creates the
current month and the three following ones.

Frozen DDL: this file does not import ``escalation.adapters.tables``, so later edits to the
code's table definitions cannot change what this revision did.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import BYTEA, JSONB, UUID

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EVENTS = (
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
STATUSES = ("pending", "paused", "terminal", "cancelled")
TZ = sa.DateTime(timezone=True)
MONEY = sa.Numeric(18, 2)

FORBID_FUNCTION = """
CREATE FUNCTION escalation_audit_forbid_mutation() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% on %.% is forbidden: the escalation ledger is append-only',
    TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME
    USING ERRCODE = 'insufficient_privilege';
END
$$
"""


PARTITION_SCHEMA = "escalation_ledger_parts"

ENSURE_PARTITION_FUNCTION = """
CREATE FUNCTION escalation_audit_ensure_partition(month_start date) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  m date := date_trunc('month', month_start)::date;
  part text := format('escalation_audit_y%%sm%%s', to_char(m, 'YYYY'), to_char(m, 'MM'));
BEGIN
  PERFORM pg_advisory_xact_lock(7305114211002);
  IF to_regclass(format('%(parts)s.%%I', part)) IS NOT NULL THEN
    RETURN NULL;
  END IF;
  EXECUTE format(
    'CREATE TABLE %(parts)s.%%I PARTITION OF %(schema)s.escalation_audit'
    ' FOR VALUES FROM (%%L) TO (%%L)',
    part, m::text || ' 00:00:00+00', (m + interval '1 month')::date::text || ' 00:00:00+00');
  EXECUTE format(
    'CREATE TRIGGER trg_escalation_audit_no_truncate BEFORE TRUNCATE ON %(parts)s.%%I'
    ' FOR EACH STATEMENT EXECUTE FUNCTION %(schema)s.escalation_audit_forbid_mutation()', part);
  EXECUTE format(
    'ALTER TABLE %(parts)s.%%I ENABLE ALWAYS TRIGGER trg_escalation_audit_no_truncate', part);
  EXECUTE format(
    'ALTER TABLE %(parts)s.%%I ENABLE ALWAYS TRIGGER trg_escalation_audit_no_mutation', part);
  RETURN part;
END
$$
"""
"""Create the month's partition (+ its triggers) unless it exists; returns its name or NULL.
Serialised by an advisory lock so concurrent callers do not collide."""


def _in(column: str, values: Sequence[str]) -> str:
    return f"{column} IN (" + ", ".join(f"'{v}'" for v in values) + ")"


def upgrade() -> None:
    """Create escalation_audit (+ triggers) and escalation_state."""
    op.create_table(
        "escalation_audit",
        sa.Column("dispute_id", UUID(as_uuid=True), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("match_decision", sa.Text, nullable=False),
        sa.Column("from_tier", sa.Text),
        sa.Column("to_tier", sa.Text),
        sa.Column("ladder", sa.Text, nullable=False),
        sa.Column("ladder_version", sa.Integer, nullable=False),
        sa.Column("calendar_version", sa.Text),
        sa.Column("materiality", MONEY, nullable=False),
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
        sa.Column("chain_created_at", TZ, nullable=False),
        sa.PrimaryKeyConstraint(
            "dispute_id", "seq", "chain_created_at", name="pk_escalation_audit"
        ),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_escalation_audit_seq_positive")),
        sa.CheckConstraint(_in("event", EVENTS), name=op.f("ck_escalation_audit_event_known")),
        sa.CheckConstraint(
            "octet_length(row_hash) = 32", name=op.f("ck_escalation_audit_row_hash_len")
        ),
        sa.CheckConstraint(
            "octet_length(prev_hash) = 32", name=op.f("ck_escalation_audit_prev_hash_len")
        ),
        postgresql_partition_by="RANGE (chain_created_at)",
    )
    op.create_index("ix_escalation_audit_decided_at", "escalation_audit", ["decided_at"])
    op.create_index(
        "ix_escalation_audit_event_decided_at", "escalation_audit", ["event", "decided_at"]
    )
    op.create_index("ix_escalation_audit_actor", "escalation_audit", ["actor"])

    op.execute(FORBID_FUNCTION)
    op.execute(
        "CREATE TRIGGER trg_escalation_audit_no_mutation"
        " BEFORE UPDATE OR DELETE ON escalation_audit"
        " FOR EACH ROW EXECUTE FUNCTION escalation_audit_forbid_mutation()"
    )
    op.execute(
        "CREATE TRIGGER trg_escalation_audit_no_truncate"
        " BEFORE TRUNCATE ON escalation_audit"
        " FOR EACH STATEMENT EXECUTE FUNCTION escalation_audit_forbid_mutation()"
    )
    op.execute(
        "ALTER TABLE escalation_audit ENABLE ALWAYS TRIGGER trg_escalation_audit_no_mutation"
    )
    op.execute(
        "ALTER TABLE escalation_audit ENABLE ALWAYS TRIGGER trg_escalation_audit_no_truncate"
    )
    schema = op.get_bind().execute(sa.text("SELECT current_schema()")).scalar_one()
    op.execute(f"CREATE SCHEMA IF NOT EXISTS {PARTITION_SCHEMA}")
    op.execute(ENSURE_PARTITION_FUNCTION % {"parts": PARTITION_SCHEMA, "schema": schema})
    op.execute(
        "SELECT escalation_audit_ensure_partition("
        "(date_trunc('month', now() AT TIME ZONE 'UTC') + make_interval(months => m))::date)"
        " FROM generate_series(0, 3) AS m"
    )

    op.create_table(
        "escalation_state",
        sa.Column("dispute_id", UUID(as_uuid=True), nullable=False),
        sa.Column("external_id", sa.Text),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("tier", sa.Text, nullable=False),
        sa.Column("ladder", sa.Text, nullable=False),
        sa.Column("ladder_version", sa.Integer, nullable=False),
        sa.Column("due_at", TZ),
        sa.Column("entered_tier_at", TZ, nullable=False),
        sa.Column("materiality", MONEY, nullable=False),
        sa.Column("source_hash", sa.Text, nullable=False),
        sa.Column("trace_id", sa.Text, nullable=False),
        sa.Column("regulatory_deadline", TZ),
        sa.Column("remaining_ms", sa.BigInteger),
        sa.Column("last_seq", sa.BigInteger, nullable=False),
        sa.Column("last_hash", BYTEA, nullable=False),
        sa.Column("created_at", TZ, nullable=False, server_default=sa.text("clock_timestamp()")),
        sa.Column("updated_at", TZ, nullable=False, server_default=sa.text("clock_timestamp()")),
        sa.PrimaryKeyConstraint("dispute_id", name="pk_escalation_state"),
        sa.CheckConstraint(_in("status", STATUSES), name=op.f("ck_escalation_state_status_known")),
        sa.CheckConstraint(
            "(status = 'pending') = (due_at IS NOT NULL)",
            name=op.f("ck_escalation_state_due_at_iff_pending"),
        ),
        sa.CheckConstraint("last_seq >= 1", name=op.f("ck_escalation_state_last_seq_positive")),
    )
    op.create_index(
        "ix_escalation_state_due_at_pending",
        "escalation_state",
        ["due_at"],
        postgresql_where=sa.text("status = 'pending'"),
    )


def downgrade() -> None:
    """Drop the projection, the ledger, its triggers and function (destroys the record)."""
    op.drop_index("ix_escalation_state_due_at_pending", table_name="escalation_state")
    op.drop_table("escalation_state")
    op.execute("DROP TRIGGER trg_escalation_audit_no_truncate ON escalation_audit")
    op.execute("DROP TRIGGER trg_escalation_audit_no_mutation ON escalation_audit")
    op.execute("DROP FUNCTION escalation_audit_ensure_partition(date)")
    op.execute("DROP TABLE escalation_audit CASCADE")  # the parent drops every partition
    op.execute(f"DROP SCHEMA IF EXISTS {PARTITION_SCHEMA} CASCADE")
    op.execute("DROP FUNCTION escalation_audit_forbid_mutation()")
