"""PostgreSQL tables (SQLAlchemy 2 Core): the append-only ledger and the projection.

* ``escalation_audit``: the ledger, one row per event, append only. The database refuses
  UPDATE, DELETE and TRUNCATE (triggers created by the first Alembic revision, ``ENABLE
  ALWAYS``, on the parent and every partition). Partitioned by month on
  ``chain_created_at`` (the dispute's ``escalation_state.created_at``, identical on every
  row of one dispute). Primary key ``(dispute_id, seq, chain_created_at)``: since one
  dispute has one ``chain_created_at``, this is ``(dispute_id, seq)`` unique in effect, and
  the projection's compare-and-set on ``last_seq`` serialises seq numbers
  (docs/audit.md). ``row_hash`` chains each row to the previous one of the same dispute
  (``escalation.domain.audit_hash``).
* ``audit_checkpoint`` / ``audit_checkpoint_head`` (revision 0002): append-only
  checkpoints, a Merkle root over all chain heads chained to the previous checkpoint.
* ``audit_retention``: partitions dropped by retention (append-only).
* ``escalation_state``: the projection, one mutable row per escalation: current tier, due
  time, chain head (``last_seq``/``last_hash``). It is updated in the same transaction as the
  ledger row, and its row lock serialises appends to one dispute's chain.

This module is the code's view of the schema; the Alembic revisions under ``migrations/``
create it (``tests/integration/test_migrations.py`` checks that both agree).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, BYTEA, JSONB, UUID

from escalation.domain.audit_hash import LEDGER_COLUMNS

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
    "ACTION_RECORDED",
    "RESOLVED",
    "LADDER_RELEASED",
    "LADDER_BASELINE",
    "LADDER_APPLIED",
    "LADDER_APPLY_FAILED",
    "SCHEDULE_RESET",
)
"""Values allowed in ``escalation_audit.event`` (a CHECK constraint enforces the list)."""

LADDER_CHAIN_EVENTS: tuple[str, ...] = (
    "LADDER_RELEASED", "LADDER_BASELINE", "LADDER_APPLIED", "LADDER_APPLY_FAILED")
"""The events of a ladder version's own chain (``domain.ladder_ledger``; ADR 0012): never on
a dispute's chain, and no dispute's projection row belongs to them."""

STATUSES: tuple[str, ...] = ("pending", "paused", "terminal", "cancelled", "resolved")

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
    sa.Column("chain_created_at", TZ, nullable=False),
    sa.PrimaryKeyConstraint("dispute_id", "seq", "chain_created_at"),
    sa.CheckConstraint("seq >= 1", name="seq_positive"),
    sa.CheckConstraint(
        "event IN (" + ", ".join(f"'{e}'" for e in LEDGER_EVENTS) + ")", name="event_known"
    ),
    sa.CheckConstraint("octet_length(row_hash) = 32", name="row_hash_len"),
    sa.CheckConstraint("octet_length(prev_hash) = 32", name="prev_hash_len"),
    sa.Index(None, "decided_at"),
    sa.Index(None, "event", "decided_at"),
    sa.Index(None, "actor"),
    sa.Index(None, "recorded_at"),  # migration 0016: the SLA rollup's refresh reads by it
    # Migration 0021: the audit search's decision filter (adapters.audit_search), for the
    # rows whose decision is not their event (the event index finds the others).
    sa.Index("ix_escalation_audit_decision", "match_decision", "decided_at",
             postgresql_where=sa.text("match_decision <> event")),
    # Migration 0004: a pre-breach warning (dispute, tier-entry seq, fraction) is
    # recorded at most once.
    sa.Index(
        "ux_escalation_audit_warning_once",
        "dispute_id",
        "chain_created_at",
        sa.text("(details ->> 'tier_seq')"),
        sa.text("(details ->> 'fraction')"),
        unique=True,
        postgresql_where=sa.text("event = 'WARNING'"),
    ),
    postgresql_partition_by="RANGE (chain_created_at)",
)
if {c.name for c in escalation_audit.columns} != set(LEDGER_COLUMNS):  # pragma: no cover
    raise RuntimeError("escalation_audit's columns differ from domain.audit_hash.LEDGER_COLUMNS")

PARTITION_SCHEMA = "escalation_ledger_parts"
"""Schema holding the monthly partitions ``escalation_audit_yYYYYmMM`` (revision 0001)."""

escalation_state = sa.Table(
    "escalation_state",
    metadata,
    sa.Column("dispute_id", UUID(as_uuid=True), nullable=False),
    sa.Column("external_id", sa.Text),
    # migration 0015: the source system's name (NULL: not known, e.g. named by UUID over the
    # API, or enqueued before the name was kept); the ENQUEUED row's ``details.source``
    sa.Column("source", sa.Text),
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
    # Migration 0004: every regulatory deadline, [["name", "ISO UTC"], ...]
    sa.Column("deadlines", JSONB),
    # migration 0010: every clock's instant after the last action or resolution (NULL = the
    # same as ``deadlines``, which holds only the clocks that still bind)
    sa.Column("obligations", JSONB),
    # migration 0009: the institution zone and base calendar the escalation counts in
    sa.Column("institution_tz", sa.Text),
    sa.Column("institution_calendar", sa.Text),
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
    # migration 0017: ``audit show EXTERNAL_ID`` (find_by_external_id)
    sa.Index("ix_escalation_state_external_id", "external_id"),
)

escalation_clock = sa.Table(
    "escalation_clock",
    metadata,
    sa.Column("dispute_id", UUID(as_uuid=True), nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("at", TZ, nullable=False),
    sa.Column("ladder", sa.Text, nullable=False),
    sa.Column("ladder_version", sa.Integer, nullable=False),
    sa.Column("external_id", sa.Text),
    sa.Column("open", sa.Boolean, nullable=False),
    sa.Column("ended", sa.Boolean, nullable=False),
    sa.PrimaryKeyConstraint("dispute_id", "name"),
    sa.Index("ix_escalation_clock_at", "at", "dispute_id", "name"),
    sa.Index("ix_escalation_clock_open", "at",
             postgresql_where=sa.text("open AND NOT ended")),
    sa.Index("ix_escalation_clock_settled", "at", "dispute_id", "name",
             postgresql_where=sa.text("NOT (open AND NOT ended)")),
    sa.Index("ix_escalation_clock_after_end", "name", "at", postgresql_where=sa.text("ended")),
)
"""Migration 0017: every clock of the projection with a known instant, one row each (kept
by triggers on ``escalation_state``; never written by the code): ``open`` = among the
binding ``deadlines``, ``ended`` = the dispute is resolved or cancelled. The console's
deadline lists page through it (``console_queries``)."""

sla_rollup = sa.Table(
    "sla_rollup",
    metadata,
    sa.Column("dispute_id", UUID(as_uuid=True), nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("at", TZ, nullable=False),
    sa.Column("ladder", sa.Text, nullable=False),
    sa.Column("tier", sa.Text, nullable=False),
    sa.Column("duration_s", sa.Float),
    sa.Column("state", sa.Text),
    sa.Column("name", sa.Text(collation="C")),
    sa.Column("late_s", sa.Float),
    sa.Column("open_miss", sa.Boolean),
    sa.CheckConstraint("kind IN ('entered', 'on_time', 'late', 'resolved', 'deadline')",
                       name="kind_known"),
    # Migration 0022: the window's aggregates (adapters.sla_rollup) read only the index
    sa.Index("ix_sla_rollup_window", "at",
             postgresql_include=["kind", "ladder", "tier", "state", "name", "duration_s"]),
    sa.Index(None, "dispute_id"),
    # Migration 0023: the exact median and p95 read only the window's ended stays
    sa.Index("ix_sla_rollup_ended", "at", postgresql_include=["ladder", "tier", "duration_s"],
             postgresql_where=sa.text("duration_s IS NOT NULL")),
    sa.Index("ix_sla_rollup_open_deadlines", "at",
             postgresql_where=sa.text("kind = 'deadline' AND state IN ('at_risk', 'pending')")),
    sa.Index("ix_sla_rollup_deadline_keys", "at", "dispute_id", "name",
             postgresql_where=sa.text("kind = 'deadline'")),
    sa.Index("ix_sla_rollup_deadline_state", "state", "at", "dispute_id", "name",
             postgresql_where=sa.text("kind = 'deadline'")),
    sa.Index("ix_sla_rollup_open_miss", "at", "dispute_id", "name",
             postgresql_where=sa.text("kind = 'deadline' AND open_miss")),
)
"""What each dispute contributes to the SLA report (migration 0016, ADR 0033): one row per
tier-stay event and per regulatory deadline, as ``service_layer.sla_report.rollup_rows``
computes them, a deadline with its lateness and whether it is a miss still open (migration
0019: the console's lists and overview); replaced per dispute by each refresh
(``adapters.sla_rollup``)."""

sla_rollup_hours = sa.Table(
    "sla_rollup_hours",
    metadata,
    sa.Column("hour", TZ, nullable=False),
    sa.Column("ladder", sa.Text, nullable=False),
    sa.Column("tier", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("name", sa.Text(collation="C"), nullable=False),
    sa.Column("bucket", sa.SmallInteger, nullable=False),
    sa.Column("n", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint("hour", "ladder", "tier", "kind", "state", "name", "bucket"),
)
"""How many ``sla_rollup`` rows there are per UTC hour of ``at`` and per (ladder, tier, kind,
state, name, duration bucket) (migration 0023; ``state`` and ``name`` '' where the row has
none, ``bucket`` -1 without a duration): kept by ``adapters.sla_rollup`` in the
transaction that replaces the rows, so a window's counts sum its whole hours."""

sla_rollup_state = sa.Table(
    "sla_rollup_state",
    metadata,
    sa.Column("id", sa.Integer, nullable=False),
    sa.Column("watermark", TZ, nullable=False),
    sa.Column("computed_at", TZ, nullable=False),
    sa.Column("grace_s", sa.Integer, nullable=False),
    sa.Column("backfill_after", UUID(as_uuid=True)),
    sa.PrimaryKeyConstraint("id"),
    sa.CheckConstraint("id = 1", name="one_row"),
)
"""The SLA rollup's one state row: the ledger watermark of its last refresh, the instant its
deadline states were computed at, the grace its stays were counted with, and while a full
refresh (backfill) is unfinished the last dispute id it committed (migration 0018)."""

audit_checkpoint = sa.Table(
    "audit_checkpoint",
    metadata,
    sa.Column("checkpoint_id", sa.BigInteger, nullable=False, autoincrement=False),
    sa.Column("created_at", TZ, nullable=False, server_default=sa.text("clock_timestamp()")),
    sa.Column("head_count", sa.BigInteger, nullable=False),
    sa.Column("heads_root", BYTEA, nullable=False),
    sa.Column("prev_checkpoint_hash", BYTEA, nullable=False),
    sa.Column("checkpoint_hash", BYTEA, nullable=False),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("signature", BYTEA),
    sa.Column("signing_key", BYTEA),
    sa.Column("retention_count", sa.BigInteger),
    sa.Column("retention_hash", BYTEA),
    sa.Column("retention_covered", ARRAY(sa.Text)),
    sa.Column("heads_complete", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.PrimaryKeyConstraint("checkpoint_id"),
    sa.CheckConstraint("checkpoint_id >= 1", name="id_positive"),
    sa.CheckConstraint(
        "(signature IS NULL) = (signing_key IS NULL)"
        " AND (retention_count IS NULL) = (retention_hash IS NULL)"
        " AND (retention_hash IS NULL) = (retention_covered IS NULL)", name="signature_whole"),
)
"""One row per checkpoint (append-only): see ``escalation.service_layer.checkpoint``.
``signature`` (Ed25519 over the digest) and ``signing_key`` (raw public key) are NULL on
checkpoints sealed before signatures were stored; ``retention_count`` / ``retention_hash`` /
``retention_covered`` (``name:action`` keys) name the ``audit_retention`` rows the checkpoint
covers. ``heads_complete`` (migration 0020): the checkpoint stores every head it seals
(every checkpoint before 0020, and a first one), or only those changed since the checkpoint
before it."""

audit_checkpoint_head = sa.Table(
    "audit_checkpoint_head",
    metadata,
    sa.Column("checkpoint_id", sa.BigInteger, nullable=False, autoincrement=False),
    sa.Column("dispute_id", UUID(as_uuid=True), nullable=False),
    sa.Column("last_seq", sa.BigInteger, nullable=False),
    sa.Column("last_hash", BYTEA, nullable=False),
    sa.Column("chain_created_at", TZ, nullable=False),
    sa.Column("removed", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.PrimaryKeyConstraint("checkpoint_id", "dispute_id"),
    sa.ForeignKeyConstraint(["checkpoint_id"], ["audit_checkpoint.checkpoint_id"]),
    sa.Index("ix_audit_checkpoint_head_chain", "dispute_id", "checkpoint_id"),
)
"""The chain heads a checkpoint stores (append-only): all of its Merkle leaves on a complete
checkpoint, else those changed since the checkpoint before it, ``removed`` marking a chain
no longer sealed from that checkpoint on (migration 0020). The heads checkpoint k seals are,
per chain, the row of the newest checkpoint <= k from the newest complete one <= k on
(``adapters.checkpoints``)."""

audit_retention = sa.Table(
    "audit_retention",
    metadata,
    sa.Column("partition_name", sa.Text, nullable=False),
    sa.Column("range_from", TZ, nullable=False),
    sa.Column("range_to", TZ, nullable=False),
    sa.Column("row_count", sa.BigInteger, nullable=False),
    sa.Column("max_recorded_at", TZ),
    sa.Column("retention_days", sa.Integer, nullable=False),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("done_at", TZ, nullable=False, server_default=sa.text("clock_timestamp()")),
    sa.PrimaryKeyConstraint("partition_name", "action"),
    sa.CheckConstraint("action IN ('detached', 'dropped')", name="action_known"),
)
"""Partitions removed by retention (append-only; a BEFORE INSERT trigger refuses a row that
is not a past-retention, really removed partition). Verify excuses a sealed chain's absence
only by a row whose month holds the chain and which passes the same checks."""

ladder_history = sa.Table(
    "ladder_history",
    metadata,
    sa.Column("run_id", sa.BigInteger, sa.Identity(), nullable=False),
    sa.Column("ladder", sa.Text, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("checksum", sa.Text, nullable=False),
    sa.Column("plan_hash", sa.Text, nullable=False),
    sa.Column("applied_by", sa.Text, nullable=False),
    sa.Column("started_at", TZ, nullable=False),
    sa.Column("finished_at", TZ),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("planned", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("migrated", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("replanned", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("skipped", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("blocked", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("not_owner", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("last_dispute_id", UUID(as_uuid=True)),
    sa.Column("redis_synced_through", UUID(as_uuid=True)),
    sa.Column("error", sa.Text),
    sa.Column("reason", sa.Text, nullable=False, server_default=sa.text("''")),
    sa.PrimaryKeyConstraint("run_id"),
    sa.CheckConstraint("status IN ('running', 'done', 'failed')", name="status_known"),
    sa.Index(None, "ladder", "version"),
    sa.Index(
        "uq_ladder_history_one_running",
        "ladder",
        "version",
        unique=True,
        postgresql_where=sa.text("status = 'running'"),
    ),
)
"""Ladder migrations applied (docs/ladder-migrations.md): one row per ``ladder apply`` run,
Flyway-style.

``checksum`` is the SHA-256 of the target file when applied (``ladder check`` refuses a
changed file); ``last_dispute_id`` / ``redis_synced_through`` are the resume points (batches
go in dispute-id order: PostgreSQL committed through / Redis restored through)."""

ladder_release = sa.Table(
    "ladder_release",
    metadata,
    sa.Column("ladder", sa.Text, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("checksum", sa.Text, nullable=False),
    sa.Column("released_at", TZ, nullable=False),
    sa.Column("released_by", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False, server_default=sa.text("''")),
    # revision 0013: the head of the version's own ledger chain (NULL for a release
    # recorded before it)
    sa.Column("chain_id", UUID(as_uuid=True)),
    sa.Column("last_seq", sa.BigInteger),
    sa.Column("last_hash", BYTEA),
    sa.Column("chain_created_at", TZ),
    sa.PrimaryKeyConstraint("ladder", "version"),
    sa.CheckConstraint("version >= 1", name="version_positive"),
    sa.CheckConstraint(
        "(chain_id IS NULL) = (last_seq IS NULL) AND (chain_id IS NULL) = (last_hash IS NULL)"
        " AND (chain_id IS NULL) = (chain_created_at IS NULL)", name="chain_head_whole"),
    sa.UniqueConstraint("chain_id"),
)
"""Released ladder versions (``escalation ladder release``): the checksum of each file as
released. Enqueue pins the newest released version; workers decide only with a released file
whose checksum still matches (docs/adr/0004-ladder-release.md). ``chain_id``, ``last_seq``,
``last_hash`` and ``chain_created_at`` are the head of the version's ledger chain (its
LADDER_RELEASED or LADDER_BASELINE row, then its apply runs' rows): appends lock this row,
and ``audit verify`` compares it with the chain's last row (ADR 0012)."""

maintenance_runs = sa.Table(
    "maintenance_runs",
    metadata,
    sa.Column("job", sa.Text, nullable=False),
    sa.Column("last_occurrence", TZ, nullable=False),
    sa.Column("last_run_at", TZ, nullable=False),
    sa.Column("last_status", sa.Text, nullable=False),
    sa.Column("runs", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("missed", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("last_leader", sa.Text, nullable=False),
    sa.Column("details", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.PrimaryKeyConstraint("job"),
    sa.CheckConstraint("last_status IN ('running', 'ok', 'failed')", name="status_known"),
)
"""Recurring maintenance (docs/reliability.md "Maintenance"): one row per job. ``last_occurrence``
is the schedule slot (epoch-aligned multiple of the job's interval) last claimed; claiming a slot
is a compare-and-set on it, so one occurrence runs once across every worker; ``missed`` counts the
slots skipped by the catch-up policy (run once on recovery, never N times)."""

API_ROLES: tuple[str, ...] = ("service", "compliance", "admin")

api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("role", sa.Text, nullable=False),
    sa.Column("token_sha256", sa.Text, nullable=False),
    sa.Column("created_at", TZ, nullable=False, server_default=sa.text("now()")),
    sa.Column("expires_at", TZ, nullable=False),
    sa.Column("revoked_at", TZ),
    sa.PrimaryKeyConstraint("name"),
    sa.UniqueConstraint("token_sha256"),
    sa.CheckConstraint("role IN ('service', 'compliance', 'admin')", name="role_known"),
    # Migration 0011: scopes (NULL = unscoped) and read-only
    sa.Column("sources", ARRAY(sa.Text)),
    sa.Column("read_only", sa.Boolean, nullable=False, server_default=sa.text("false")),
    sa.CheckConstraint("sources IS NULL OR (role = 'service' AND cardinality(sources) >= 1)",
                       name="sources_for_service"),
)
"""HTTP API bearer tokens (revision 0007): the SHA-256 hex digest of each secret, never the
secret; ``name`` is the actor on every ledger row a request with the token causes.
Revision 0011 adds the scope: ``sources`` (NULL = every dispute) and ``read_only``."""

console_sessions = sa.Table(
    "console_sessions",
    metadata,
    sa.Column("id_sha256", sa.Text, nullable=False),
    sa.Column("token_name", sa.Text, nullable=False),
    sa.Column("created_at", TZ, nullable=False, server_default=sa.text("clock_timestamp()")),
    sa.Column("last_seen_at", TZ, nullable=False,
              server_default=sa.text("clock_timestamp()")),
    sa.Column("expires_at", TZ, nullable=False),
    sa.Column("ended_at", TZ),
    sa.Column("ended_why", sa.Text),
    sa.PrimaryKeyConstraint("id_sha256"),
    sa.ForeignKeyConstraint(["token_name"], ["api_tokens.name"]),
    sa.Index(None, "token_name"),
)
"""Console sessions (revision 0011): one row per session id (issued at sign-in or at a
rotation, ``created_at``): its SHA-256 hex digest (the cookie value, never stored), the
token signed in with, the last request (idle timeout), the absolute end (a rotation copies
the sign-in's), and when and why the id ended (``signed_out``, ``replaced``,
``token_revoked``, ``rotated``)."""

deployment_binding = sa.Table(
    "deployment_binding",
    metadata,
    sa.Column("id", sa.SmallInteger, nullable=False, server_default=sa.text("1")),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("bound_at", TZ, nullable=False, server_default=sa.text("now()")),
    sa.Column("stamp", sa.Text),  # revision 0014: with the OID, the identity Redis records
    sa.PrimaryKeyConstraint("id"),
    sa.CheckConstraint("id = 1", name="single_row"),
)
"""The namespace this database serves (at most one row): ``escalation db upgrade`` binds it,
every command refuses a different namespace (docs/adr/0009-one-namespace-per-database.md).
``stamp`` (NULL until bound by this version) and the database's OID make the identity the
namespace's Redis records at binding (docs/adr/0014-redis-ahead-of-the-ledger.md)."""
