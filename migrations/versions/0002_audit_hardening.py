"""Audit hardening: checkpoints, retention log, roles and privileges (docs/audit.md).

Revision ID: 0002
Revises: 0001

* ``audit_checkpoint`` + ``audit_checkpoint_head``: Merkle checkpoints over the chain heads,
  append-only like the ledger (same trigger function, ``ENABLE ALWAYS``).
* ``audit_retention``: partitions detached/dropped by retention, append-only.
* Roles ``escalation_app`` (runtime) and ``escalation_auditor`` (read-only), created
  ``NOLOGIN`` only if missing (roles are cluster-wide: an operator may have created them
  with LOGIN and a password; this revision never alters or drops them). The app may only
  SELECT and INSERT on the ledger and checkpoints; it may UPDATE the projection; it has no
  USAGE on the partition schema, so it cannot touch a partition directly. It may EXECUTE
  the SECURITY DEFINER ``escalation_audit_ensure_partition`` to create next months'
  partitions from the worker's maintenance (docs/audit.md, "Partitions and retention").

Frozen DDL: does not import ``escalation.adapters.tables``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import BYTEA, UUID

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)
APPEND_ONLY = ("audit_checkpoint", "audit_checkpoint_head", "audit_retention")
ROLES = ("escalation_app", "escalation_auditor")

CREATE_ROLE = """
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
    BEGIN
      CREATE ROLE {role} NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
      NULL;  -- created concurrently by a migration of another database
    END;
  END IF;
END
$$
"""

GRANTS = (
    "REVOKE ALL ON escalation_audit, audit_checkpoint, audit_checkpoint_head, audit_retention"
    " FROM PUBLIC",
    "GRANT SELECT, INSERT ON escalation_audit TO escalation_app",
    "GRANT SELECT, INSERT, UPDATE ON escalation_state TO escalation_app",
    "GRANT SELECT, INSERT ON audit_checkpoint, audit_checkpoint_head TO escalation_app",
    "GRANT SELECT ON audit_retention, alembic_version TO escalation_app",
    "GRANT SELECT ON escalation_audit, escalation_state, audit_checkpoint,"
    " audit_checkpoint_head, audit_retention, alembic_version TO escalation_auditor",
    "REVOKE ALL ON FUNCTION escalation_audit_ensure_partition(date) FROM PUBLIC",
    "GRANT EXECUTE ON FUNCTION escalation_audit_ensure_partition(date) TO escalation_app",
)


def _append_only(table: str) -> None:
    op.execute(
        f"CREATE TRIGGER trg_{table}_no_mutation BEFORE UPDATE OR DELETE ON {table}"
        " FOR EACH ROW EXECUTE FUNCTION escalation_audit_forbid_mutation()"
    )
    op.execute(
        f"CREATE TRIGGER trg_{table}_no_truncate BEFORE TRUNCATE ON {table}"
        " FOR EACH STATEMENT EXECUTE FUNCTION escalation_audit_forbid_mutation()"
    )
    op.execute(f"ALTER TABLE {table} ENABLE ALWAYS TRIGGER trg_{table}_no_mutation")
    op.execute(f"ALTER TABLE {table} ENABLE ALWAYS TRIGGER trg_{table}_no_truncate")


def upgrade() -> None:
    """Create the checkpoint and retention tables, the roles (if missing) and the grants."""
    op.create_table(
        "audit_checkpoint",
        sa.Column("checkpoint_id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("created_at", TZ, nullable=False, server_default=sa.text("clock_timestamp()")),
        sa.Column("head_count", sa.BigInteger, nullable=False),
        sa.Column("heads_root", BYTEA, nullable=False),
        sa.Column("prev_checkpoint_hash", BYTEA, nullable=False),
        sa.Column("checkpoint_hash", BYTEA, nullable=False),
        sa.Column("actor", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("checkpoint_id", name="pk_audit_checkpoint"),
        sa.CheckConstraint("checkpoint_id >= 1", name=op.f("ck_audit_checkpoint_id_positive")),
    )
    op.create_table(
        "audit_checkpoint_head",
        sa.Column("checkpoint_id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("dispute_id", UUID(as_uuid=True), nullable=False),
        sa.Column("last_seq", sa.BigInteger, nullable=False),
        sa.Column("last_hash", BYTEA, nullable=False),
        sa.Column("chain_created_at", TZ, nullable=False),
        sa.PrimaryKeyConstraint("checkpoint_id", "dispute_id", name="pk_audit_checkpoint_head"),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["audit_checkpoint.checkpoint_id"],
            name="fk_audit_checkpoint_head_checkpoint_id_audit_checkpoint",
        ),
    )
    op.create_table(
        "audit_retention",
        sa.Column("partition_name", sa.Text, nullable=False),
        sa.Column("range_from", TZ, nullable=False),
        sa.Column("range_to", TZ, nullable=False),
        sa.Column("row_count", sa.BigInteger, nullable=False),
        sa.Column("max_recorded_at", TZ),
        sa.Column("retention_days", sa.Integer, nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("actor", sa.Text, nullable=False),
        sa.Column("done_at", TZ, nullable=False, server_default=sa.text("clock_timestamp()")),
        sa.PrimaryKeyConstraint("partition_name", "action", name="pk_audit_retention"),
        sa.CheckConstraint(
            "action IN ('detached', 'dropped')", name=op.f("ck_audit_retention_action_known")
        ),
    )
    for table in APPEND_ONLY:
        _append_only(table)
    for role in ROLES:
        op.execute(CREATE_ROLE.format(role=role))
    op.execute("ALTER FUNCTION escalation_audit_ensure_partition(date) SECURITY DEFINER")
    for grant in GRANTS:
        op.execute(grant)


def downgrade() -> None:
    """Revoke the grants and drop the tables; the (cluster-wide) roles are left in place."""
    op.execute("REVOKE ALL ON FUNCTION escalation_audit_ensure_partition(date) FROM escalation_app")
    op.execute("ALTER FUNCTION escalation_audit_ensure_partition(date) SECURITY INVOKER")
    for role in ROLES:
        op.execute(
            "REVOKE ALL ON escalation_audit, escalation_state, alembic_version"
            f" FROM {role}"
        )
    for table in ("audit_retention", "audit_checkpoint_head", "audit_checkpoint"):
        op.drop_table(table)
