"""Audit evidence: retention rows and checkpoint signatures (docs/adr/0013-checkpoint-trust.md).

Revision ID: 0012
Revises: 0011

* ``audit_checkpoint`` gains ``signature`` (Ed25519, 64 bytes) and ``signing_key`` (the raw
  32-byte public key) over the checkpoint's digest, and ``retention_count`` /
  ``retention_hash`` / ``retention_covered``: the retention rows the checkpoint covers (their
  ``name:action`` keys). Rows sealed before this revision keep NULL (no stored signature).
* ``escalation_app`` may no longer INSERT checkpoint rows: a new role ``escalation_sealer``
  (created ``NOLOGIN`` only if missing, never altered or dropped, like 0002's roles) may
  SELECT every table of the schema (what the seal's verification reads, also tables later
  revisions create) and INSERT checkpoints; the table owner may too.
* ``audit_retention`` refuses (BEFORE INSERT trigger, ``ENABLE ALWAYS``) a row whose name is
  not a ledger partition name, whose range is not that partition's month, whose range or
  newest row is not older than its retention period (at least 365 days), or whose partition
  still exists (``dropped``) or is still attached (``detached``); ``done_at`` is the
  database clock, whatever the INSERT says.

Frozen DDL: does not import ``escalation.adapters.tables``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, BYTEA

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEALER = "escalation_sealer"

CREATE_SEALER = f"""
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{SEALER}') THEN
    BEGIN
      CREATE ROLE {SEALER} NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
      NULL;  -- created concurrently by a migration of another database
    END;
  END IF;
END
$$
"""

RETENTION_CHECK = r"""
CREATE FUNCTION escalation_audit_retention_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  m text[];
  first timestamptz;
  cutoff timestamptz;
BEGIN
  NEW.done_at := clock_timestamp();
  m := regexp_match(NEW.partition_name, '^escalation_audit_y(\d{4})m(\d{2})$');
  IF m IS NULL THEN
    RAISE EXCEPTION 'audit_retention: % is not a ledger partition name', NEW.partition_name
      USING ERRCODE = '23514';
  END IF;
  first := make_timestamptz(m[1]::int, m[2]::int, 1, 0, 0, 0, 'UTC');
  IF NEW.range_from <> first OR NEW.range_to <> first + interval '1 month' THEN
    RAISE EXCEPTION 'audit_retention: range [%, %) is not the month of %',
      NEW.range_from, NEW.range_to, NEW.partition_name USING ERRCODE = '23514';
  END IF;
  IF NEW.retention_days < 365 THEN
    RAISE EXCEPTION 'audit_retention: retention_days % is below 365', NEW.retention_days
      USING ERRCODE = '23514';
  END IF;
  cutoff := NEW.done_at - make_interval(days => NEW.retention_days);
  IF NEW.range_to > cutoff OR coalesce(NEW.max_recorded_at > cutoff, false) THEN
    RAISE EXCEPTION 'audit_retention: % is not older than its retention period (cutoff %)',
      NEW.partition_name, cutoff USING ERRCODE = '23514';
  END IF;
  IF NEW.action = 'dropped'
     AND to_regclass(format('escalation_ledger_parts.%I', NEW.partition_name)) IS NOT NULL THEN
    RAISE EXCEPTION 'audit_retention: partition % still exists', NEW.partition_name
      USING ERRCODE = '23514';
  END IF;
  IF EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
               JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE i.inhparent = 'escalation_audit'::regclass
                AND n.nspname = 'escalation_ledger_parts'
                AND c.relname = NEW.partition_name) THEN
    RAISE EXCEPTION 'audit_retention: partition % is still attached', NEW.partition_name
      USING ERRCODE = '23514';
  END IF;
  RETURN NEW;
END
$$
"""


def upgrade() -> None:
    """Signature and retention columns, the sealer role, the retention row check."""
    op.add_column("audit_checkpoint", sa.Column("signature", BYTEA))
    op.add_column("audit_checkpoint", sa.Column("signing_key", BYTEA))
    op.add_column("audit_checkpoint", sa.Column("retention_count", sa.BigInteger))
    op.add_column("audit_checkpoint", sa.Column("retention_hash", BYTEA))
    op.add_column("audit_checkpoint", sa.Column("retention_covered", ARRAY(sa.Text)))
    op.create_check_constraint(
        op.f("ck_audit_checkpoint_signature_whole"), "audit_checkpoint",
        "(signature IS NULL) = (signing_key IS NULL)"
        " AND (retention_count IS NULL) = (retention_hash IS NULL)"
        " AND (retention_hash IS NULL) = (retention_covered IS NULL)")
    op.execute(CREATE_SEALER)
    op.execute("REVOKE INSERT ON audit_checkpoint, audit_checkpoint_head FROM escalation_app")
    op.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {SEALER}")
    op.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {SEALER}")
    op.execute(f"GRANT INSERT ON audit_checkpoint, audit_checkpoint_head TO {SEALER}")
    op.execute(RETENTION_CHECK)
    op.execute("CREATE TRIGGER trg_audit_retention_check BEFORE INSERT ON audit_retention"
               " FOR EACH ROW EXECUTE FUNCTION escalation_audit_retention_check()")
    op.execute("ALTER TABLE audit_retention ENABLE ALWAYS TRIGGER trg_audit_retention_check")


def downgrade() -> None:
    """Drop the check and the columns; give the app role its INSERT back; the (cluster-wide)
    sealer role is left in place, without privileges here."""
    op.execute("DROP TRIGGER trg_audit_retention_check ON audit_retention")
    op.execute("DROP FUNCTION escalation_audit_retention_check()")
    op.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT ON TABLES"
               f" FROM {SEALER}")
    op.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {SEALER}")
    op.execute("GRANT INSERT ON audit_checkpoint, audit_checkpoint_head TO escalation_app")
    op.drop_constraint(op.f("ck_audit_checkpoint_signature_whole"), "audit_checkpoint")
    for column in ("retention_covered", "retention_hash", "retention_count", "signing_key",
                   "signature"):
        op.drop_column("audit_checkpoint", column)
