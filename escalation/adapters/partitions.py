"""Monthly partitions of the ledger: create ahead, list, and drop whole expired ones.

The ledger ``escalation_audit`` is RANGE-partitioned on ``chain_created_at`` (the creation
time of the dispute's chain, identical on all its rows; docs/audit.md "Partitions"). There
is no DEFAULT partition: an insert for a month without a partition fails loudly, so
partitions are created ahead by :func:`ensure_partitions` (``escalation audit partitions
--ahead N`` and the worker's maintenance). Partitions live in schema
``escalation_ledger_parts`` and are named ``escalation_audit_yYYYYmMM``.

Retention (:func:`drop_expired`) only ever removes a partition *entirely* older than the
retention period: its whole range ends before ``now - retention`` AND its newest row was
decided and recorded before that cutoff. Anything else is refused. Rows younger than the
retention period are never removed by the application.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import sqlalchemy as sa

from escalation.adapters.metrics_queries import decisions_in
from escalation.adapters.tables import PARTITION_SCHEMA, audit_retention
from escalation.domain.errors import InvalidInput
from escalation.domain.timeutil import require_aware
from escalation.ports import DecisionFigures, RetentionRecord

MAX_AHEAD = 120
SEAL_LOCK_KEY = 7_305_114_211_003
"""Transaction-level advisory lock of the checkpoint sealer; a retention removal holds it
too (one at a time with a seal)."""
_NAME = re.compile(r"^escalation_audit_y(\d{4})m(\d{2})$")

_LIST = sa.text(
    """
    SELECT c.relname
      FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE i.inhparent = 'escalation_audit'::regclass AND n.nspname = :schema
     ORDER BY c.relname
    """
)


@dataclass(frozen=True, slots=True)
class Partition:
    """One monthly ledger partition: ``[range_from, range_to)`` in UTC."""

    name: str
    range_from: datetime
    range_to: datetime


def month_start(value: datetime | date) -> date:
    """First day of ``value``'s month (UTC for a datetime). Raises InvalidInput if naive."""
    if isinstance(value, datetime):
        value = require_aware(value, "now").astimezone(UTC).date()
    return value.replace(day=1)


def add_months(first: date, months: int) -> date:
    """``first`` (a first-of-month) moved by ``months`` (may be negative)."""
    index = first.year * 12 + first.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def partition_for(value: datetime | date) -> Partition:
    """The partition holding ``value`` (its name and UTC range)."""
    first = month_start(value)
    nxt = add_months(first, 1)
    return Partition(
        name=f"escalation_audit_y{first.year:04d}m{first.month:02d}",
        range_from=datetime(first.year, first.month, 1, tzinfo=UTC),
        range_to=datetime(nxt.year, nxt.month, 1, tzinfo=UTC),
    )


def ensure_partitions(engine: sa.Engine, now: datetime, ahead_months: int) -> list[str]:
    """Create the partitions of ``now``'s month and the ``ahead_months`` following ones.

    Idempotent (existing partitions are left alone) and safe to run concurrently (the SQL
    function ``escalation_audit_ensure_partition`` takes an advisory lock). Each new
    partition gets the TRUNCATE trigger; the UPDATE/DELETE row trigger is cloned from the
    parent; both are set ``ENABLE ALWAYS``. The function is SECURITY DEFINER, so the
    ``escalation_app`` role may call it without owning the ledger.

    Args:
        engine: engine on a database at the Alembic head.
        now: aware time (UTC month boundaries); use the database or Redis clock.
        ahead_months: 0-120 months after the current one.

    Returns:
        Names of the partitions created now (empty when all existed).

    Raises:
        InvalidInput: naive ``now`` or ``ahead_months`` out of range.
    """
    if not 0 <= ahead_months <= MAX_AHEAD:
        raise InvalidInput(f"ahead_months must be 0-{MAX_AHEAD}, got {ahead_months}")
    first = month_start(now)
    created: list[str] = []
    with engine.begin() as conn:
        for i in range(ahead_months + 1):
            name = conn.execute(
                sa.text("SELECT escalation_audit_ensure_partition(:m)"),
                {"m": add_months(first, i)},
            ).scalar_one()
            if name is not None:
                created.append(str(name))
    return created


def list_partitions(engine: sa.Engine) -> list[Partition]:
    """The ledger's attached monthly partitions, oldest first."""
    with engine.connect() as conn:
        names = list(conn.execute(_LIST, {"schema": PARTITION_SCHEMA}).scalars())
    out = []
    for name in names:
        match = _NAME.match(name)
        if match:
            out.append(partition_for(date(int(match[1]), int(match[2]), 1)))
    return out


@dataclass(frozen=True, slots=True)
class DropResult:
    """What :func:`drop_expired` did: dropped (or detached) partitions and refusals."""

    removed: list[str]
    refused: dict[str, str]


def retention_cutoff(now: datetime, retention_days: int) -> datetime:
    """``now - retention_days`` (aware UTC). Raises InvalidInput for a naive ``now``."""
    return require_aware(now, "now").astimezone(UTC) - timedelta(days=retention_days)


@dataclass(frozen=True, slots=True)
class ExpiryRun:
    """One retention run over the ledger partitions (what :func:`drop_expired` removes).

    ``now``: aware current time; ``retention_days``: >= 1; ``actor``: who runs it (on each
    ``audit_retention`` row); ``detach_only``: detach without dropping; ``names``: only
    consider these partitions (None: all).
    """

    now: datetime
    retention_days: int
    actor: str
    detach_only: bool = False
    names: list[str] | None = None


def drop_expired(
    engine: sa.Engine,
    run: ExpiryRun,
    retire: Callable[[str, DecisionFigures], None] | None = None,
) -> DropResult:
    """Detach (and drop, unless ``detach_only``) partitions entirely older than retention.

    A partition qualifies only when its range ends at or before ``cutoff = now -
    retention_days`` and none of its rows was decided or recorded after the cutoff (a
    dispute created long ago but still active keeps its partition). Each removal is logged
    in ``audit_retention`` (append-only) in the same transaction. Needs the table owner
    (the application role cannot detach or drop).

    Args:
        run: the run (:class:`ExpiryRun`); a partition named in ``run.names`` that does not
            qualify is reported in ``refused`` with the reason.
        retire: ``retire(name, figures)`` receives the decision figures of each partition
            about to be removed, inside its removal transaction before the commit (so the
            ``/metrics`` counters never fall: ``adapters.retired_figures``); an exception
            aborts that removal.

    Returns:
        :class:`DropResult`; refusals for partitions in ``names`` or, with ``names`` None,
        for none (young partitions are simply kept).

    Raises:
        InvalidInput: ``retention_days`` < 1 or naive ``now``.
    """
    retention_days, names = run.retention_days, run.names
    if retention_days < 1:
        raise InvalidInput(f"retention_days must be >= 1, got {retention_days}")
    cutoff = retention_cutoff(run.now, retention_days)
    removed: list[str] = []
    refused: dict[str, str] = {}
    wanted = None if names is None else set(names)
    parts = {p.name: p for p in list_partitions(engine)}
    for name in sorted(wanted or ()):
        if name not in parts:
            refused[name] = "no such ledger partition"
    for part in parts.values():
        if wanted is not None and part.name not in wanted:
            continue
        reason = _try_remove(engine, part, cutoff, run, retire)
        if reason is None:
            removed.append(part.name)
        elif wanted is not None:
            refused[part.name] = reason
    return DropResult(removed=removed, refused=refused)


def _try_remove(
    engine: sa.Engine,
    part: Partition,
    cutoff: datetime,
    run: ExpiryRun,
    retire: Callable[[str, DecisionFigures], None] | None = None,
) -> str | None:
    """Remove one partition if it is entirely expired; else return why not."""
    retention_days, actor, detach_only = run.retention_days, run.actor, run.detach_only
    if part.range_to > cutoff:
        return (
            f"range ends {part.range_to.isoformat()}, after the retention cutoff "
            f"{cutoff.isoformat()}"
        )
    qualified = f'{PARTITION_SCHEMA}."{part.name}"'
    with engine.begin() as conn:
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": SEAL_LOCK_KEY})
        # Lock out concurrent inserts while we look and detach.
        conn.execute(sa.text(f"LOCK TABLE {qualified} IN ACCESS EXCLUSIVE MODE"))
        count, newest = conn.execute(
            sa.text(
                f"SELECT count(*), max(greatest(recorded_at, decided_at)) FROM {qualified}"
            )
        ).one()
        if newest is not None and newest > cutoff:
            return (
                f"holds a row decided/recorded at {newest.isoformat()}, younger than the "
                f"retention cutoff {cutoff.isoformat()}"
            )
        if retire is not None:  # saved before the commit: see metrics_queries.decisions
            retire(part.name, decisions_in(conn, qualified))
        conn.execute(sa.text(f"ALTER TABLE escalation_audit DETACH PARTITION {qualified}"))
        action = "detached"
        if not detach_only:
            conn.execute(sa.text(f"DROP TABLE {qualified}"))
            action = "dropped"
        conn.execute(
            sa.insert(audit_retention).values(
                partition_name=part.name,
                range_from=part.range_from,
                range_to=part.range_to,
                row_count=int(count),
                max_recorded_at=newest,
                retention_days=retention_days,
                action=action,
                actor=actor,
            )
        )
    return None


def retention_records(conn: sa.Connection) -> list[RetentionRecord]:
    """Every ``audit_retention`` row on ``conn``, by partition name and action."""
    r = audit_retention.c
    rows = conn.execute(sa.select(audit_retention).order_by(r.partition_name, r.action))
    return [
        RetentionRecord(
            str(m["partition_name"]), m["range_from"].astimezone(UTC),
            m["range_to"].astimezone(UTC), int(m["row_count"]),
            None if m["max_recorded_at"] is None else m["max_recorded_at"].astimezone(UTC),
            int(m["retention_days"]), str(m["action"]), str(m["actor"]),
            m["done_at"].astimezone(UTC))
        for m in rows.mappings()
    ]


_TABLES = sa.text(
    """
    SELECT c.relname, EXISTS (SELECT 1 FROM pg_inherits i
                               WHERE i.inhrelid = c.oid
                                 AND i.inhparent = 'escalation_audit'::regclass)
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = :schema AND c.relkind IN ('r', 'p')
    """
)


def ledger_tables(conn: sa.Connection) -> dict[str, bool]:
    """Every table in the partition schema -> whether it is attached to the ledger."""
    return {str(n): bool(a) for n, a in conn.execute(_TABLES, {"schema": PARTITION_SCHEMA})}


def retained_from(engine: sa.Engine) -> datetime | None:
    """End of the newest range removed by retention (chains created before it are gone)."""
    with engine.connect() as conn:
        value = conn.execute(sa.select(sa.func.max(audit_retention.c.range_to))).scalar_one()
    return None if value is None else value.astimezone(UTC)
