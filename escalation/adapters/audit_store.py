"""PostgresAuditStore: the system of record (append-only ledger + projection), write side.

Every write method is ONE transaction that locks the dispute's projection row, appends
ledger row(s) chained to the projection's ``last_hash``, and updates the projection
(docs/architecture.md "Where the truth lives"). The lock on the projection row (the chain
head) serialises appends to one dispute's hash chain (ADR 0007). The only ledger
verb is append: there is no update or delete of ``escalation_audit`` anywhere in the code,
and the database refuses them anyway.

This module holds the whole write side, in reading order:

1. rows <-> domain values: a projection row (``escalation_state``) -> ``Escalation``
   (:func:`escalation_from_state`), a ledger row (``escalation_audit``) -> ``LedgerRow``
   (:func:`ledger_row`), and :func:`chained_row`, the full ledger row of an event hashed
   onto its dispute's chain (the read-side adapters import these too);
2. the SQL of the writes: statements, array-literal parameters, the binary ``COPY`` of
   ledger rows, row locks (``ladder_history`` uses the COPY and the array literals too);
3. the projection writes: the ledger rows and projection changes each write appends
   (enqueue, decisions under the record rule, single events);
4. the ENQUEUED staging for ``COPY``: the bulk enqueue through a session staging table and
   the CSV import's row templates (:class:`EnqueuedLineTemplate`);
5. :class:`PostgresAuditStore`, the transactions, then the steps of its batch enqueue.

Read methods (``get``, ``trail``, ``pending_page``, ``counts``, ``duplicate_decisions``,
``verify``) live in :mod:`escalation.adapters.audit_queries` and are mixed in here; that
module imports the row mapping (1.) inside its methods, not at load: this one imports it
for the mixin.
"""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, NamedTuple
from uuid import UUID

import orjson
import sqlalchemy as sa
from psycopg.errors import UniqueViolation
from psycopg.types.json import Jsonb
from sqlalchemy.dialects import postgresql as pg

from escalation.adapters.audit_queries import AuditQueries
from escalation.adapters.db import driver_errors
from escalation.adapters.tables import (
    LEDGER_EVENTS,
    STATUSES,
    escalation_audit,
    escalation_state,
)
from escalation.domain import audit_hash
from escalation.domain.decide import Decision
from escalation.domain.errors import ConflictError, DuplicateEvent, InvalidInput, NotFound
from escalation.domain.escalation import Escalation, Status, status_of
from escalation.domain.materiality import Materiality
from escalation.domain.record_rule import (
    ProjectionHead,
    RecordRequest,
    check_recordable,
    plan_record,
)
from escalation.domain.timeutil import require_aware
from escalation.ports import (
    ClaimedItem,
    LedgerEvent,
    LedgerRow,
    RecordOutcome,
    RecordStatus,
)

_S = escalation_state


# ---------------------------------------------------------------------- rows <-> Escalation
# Conversions between database rows and domain values: projection row -> Escalation, ledger
# row -> LedgerRow, and the full ledger row of an event, hashed onto the dispute's chain.
def utc(value: datetime) -> datetime:
    """``value`` (aware) converted to UTC; psycopg returns the session's time zone."""
    return value.astimezone(UTC)


def utc_opt(value: datetime | None) -> datetime | None:
    """:func:`utc` for a nullable column."""
    return None if value is None else value.astimezone(UTC)


def _aware_opt(value: datetime | None, name: str) -> datetime | None:
    return None if value is None else require_aware(value, name)


def escalation_from_state(row: Mapping[Any, Any]) -> Escalation:
    """Build the Escalation a projection row describes.

    ``due_at`` is NULL in the projection unless the escalation is pending; the value object
    needs a datetime, so a paused, terminal or cancelled escalation carries its
    ``entered_tier_at`` there (terminal: the instant of the terminal decision). Check
    ``status`` before trusting ``due_at``.
    """
    entered = utc(row["entered_tier_at"])
    due = utc_opt(row["due_at"]) or entered
    return Escalation(
        dispute_id=row["dispute_id"],
        tier=row["tier"],
        due_at=due,
        materiality=Materiality.parse(Decimal(row["materiality"])),
        source_hash=row["source_hash"],
        ladder=row["ladder"],
        ladder_version=int(row["ladder_version"]),
        seq=int(row["last_seq"]),
        entered_tier_at=entered,
        trace_id=row["trace_id"],
        external_id=row["external_id"],
        regulatory_deadline=utc_opt(row["regulatory_deadline"]),
        status=status_of(row["status"]),
        deadlines=deadlines_from_json(row.get("deadlines")),
        institution_tz=row.get("institution_tz"),
        institution_calendar=row.get("institution_calendar"),
        source=row.get("source"),
    )


def deadlines_json(deadlines: Sequence[tuple[str, datetime]]) -> str | None:
    """The projection's ``deadlines`` JSONB text: ``[["name", "ISO 8601 UTC"], ...]`` in the
    ladder's order, or None when there are none."""
    if not deadlines:
        return None
    return json.dumps([[n, require_aware(at, n).isoformat()] for n, at in deadlines])


def deadlines_from_json(value: Any) -> tuple[tuple[str, datetime], ...]:
    """Inverse of :func:`deadlines_json` (accepts the decoded JSONB list, text, or None)."""
    if value is None:
        return ()
    items = json.loads(value) if isinstance(value, str) else value
    return tuple((str(n), utc(datetime.fromisoformat(str(at)))) for n, at in items)


class RowFacts(NamedTuple):
    """What one ledger row says beyond its dispute's projection (:func:`chained_row`): the
    ledger columns of the same names (instants aware). A tuple: it is built once per row on
    the firing path."""

    event: str
    match_decision: str
    actor: str
    decided_at: datetime
    from_tier: str | None
    to_tier: str | None
    due_at: datetime | None
    next_due_at: datetime | None
    fence_token: int | None = None
    calendar_version: str | None = None
    details: Mapping[str, Any] | None = None


def chained_row(state: Mapping[str, Any], facts: RowFacts) -> dict[str, Any]:
    """The next ledger row of ``state``'s chain, with ``seq``, ``prev_hash`` and ``row_hash``.

    Args:
        state: the dispute's projection *after* the event (ladder, materiality, trace id, ...)
            plus ``last_seq``/``last_hash`` *before* it (the chain head being extended).
        facts: the row's own columns (:class:`RowFacts`).

    Returns:
        A dict of every ledger column except ``recorded_at`` (the database assigns it).
        ``chain_created_at`` (the partition key, not hashed) is ``state["created_at"]``, or
        None when ``state`` has no projection row yet (enqueue fills it from RETURNING).

    Raises:
        InvalidInput: a value with no canonical hash form (naive datetime, float in details).
    """
    (event, match_decision, actor, decided_at, from_tier, to_tier, due_at, next_due_at,
     fence_token, calendar_version, details) = facts
    fields: dict[str, Any] = {
        "dispute_id": state["dispute_id"],
        "seq": int(state["last_seq"]) + 1,
        "event": event,
        "match_decision": match_decision,
        "from_tier": from_tier,
        "to_tier": to_tier,
        "ladder": state["ladder"],
        "ladder_version": int(state["ladder_version"]),
        "calendar_version": calendar_version,
        "materiality": Decimal(state["materiality"]),
        "due_at": _aware_opt(due_at, "due_at"),
        "next_due_at": _aware_opt(next_due_at, "next_due_at"),
        "regulatory_deadline": utc_opt(state["regulatory_deadline"]),
        "decided_at": require_aware(decided_at, "decided_at"),
        "actor": actor,
        "trace_id": state["trace_id"],
        "source_hash": state["source_hash"],
        "external_id": state["external_id"],
        "fence_token": fence_token,
        "details": dict(details or {}),
    }
    prev = bytes(state["last_hash"])
    fields["prev_hash"] = prev
    fields["row_hash"] = audit_hash.row_hash(prev, fields)
    fields["chain_created_at"] = state.get("created_at")
    return fields


def ledger_row(row: Mapping[Any, Any]) -> LedgerRow:
    """A ledger row as the port's :class:`LedgerRow` (hashes as lower-case hex)."""
    return LedgerRow(
        dispute_id=UUID(str(row["dispute_id"])),
        seq=int(row["seq"]),
        event=row["event"],
        match_decision=row["match_decision"],
        from_tier=row["from_tier"],
        to_tier=row["to_tier"],
        ladder=row["ladder"],
        ladder_version=int(row["ladder_version"]),
        materiality=format(Decimal(row["materiality"]), "f"),
        due_at=utc_opt(row["due_at"]),
        next_due_at=utc_opt(row["next_due_at"]),
        decided_at=utc(row["decided_at"]),
        recorded_at=utc_opt(row["recorded_at"]),
        actor=row["actor"],
        trace_id=row["trace_id"],
        source_hash=row["source_hash"],
        external_id=row["external_id"],
        fence_token=row["fence_token"],
        details=dict(row["details"] or {}),
        prev_hash=bytes(row["prev_hash"]).hex(),
        row_hash=bytes(row["row_hash"]).hex(),
        calendar_version=row.get("calendar_version"),
        regulatory_deadline=utc_opt(row.get("regulatory_deadline")),
        chain_created_at=utc_opt(row.get("chain_created_at")),
        source=row.get("source"),
    )


# ---------------------------------------------------------------------- the SQL
# Statements, array-literal parameters, COPY, row locks: how the rows below reach
# PostgreSQL, and nothing about what they hold.
_UUIDS = pg.ARRAY(pg.UUID(as_uuid=True))

LOCK_MANY = (
    sa.select(_S)
    .where(_S.c.dispute_id == sa.any_(sa.bindparam("ids", type_=_UUIDS)))
    .order_by(_S.c.dispute_id)
    .with_for_update()
)
LOCK_ONE = sa.select(_S).where(_S.c.dispute_id == sa.bindparam("id")).with_for_update()
SELECT_MANY = sa.select(_S).where(_S.c.dispute_id == sa.any_(sa.bindparam("ids", type_=_UUIDS)))

COPY_COLUMNS = tuple(c.name for c in escalation_audit.columns if c.name != "recorded_at")
COPY_SQL = f"COPY escalation_audit ({', '.join(COPY_COLUMNS)}) FROM STDIN (FORMAT BINARY)"


# PostgreSQL type names psycopg dumps ledger values as (binary COPY), by SQLAlchemy column
# type, most specific first (BigInteger is an Integer, DateTime only with a time zone).
_COPY_TYPE_NAMES: tuple[tuple[type[Any], str], ...] = (
    (pg.UUID, "uuid"), (pg.JSONB, "jsonb"), (pg.BYTEA, "bytea"), (sa.BigInteger, "int8"),
    (sa.Integer, "int4"), (sa.Numeric, "numeric"), (sa.DateTime, "timestamptz"),
    (sa.Text, "text"),
)


def _copy_type(column: sa.Column[Any]) -> str:
    """The PostgreSQL type name psycopg dumps a ledger column's values as (binary COPY).

    Raises:
        TypeError: a column type without a mapping (or a timestamp without time zone).
    """
    kind = column.type
    for cls, name in _COPY_TYPE_NAMES:
        if isinstance(kind, cls):
            if name == "timestamptz" and not getattr(kind, "timezone", False):
                break
            return name
    raise TypeError(f"no binary COPY type for ledger column {column.name}: {kind!r}")


# Binary COPY: each value goes out in PostgreSQL's binary form (psycopg's C dumpers), which
# costs less to format here and to parse in the server than text.
COPY_TYPES = tuple(_copy_type(escalation_audit.c[name]) for name in COPY_COLUMNS)
_COPY_VALUES = operator.itemgetter(*COPY_COLUMNS)  # a ledger row dict -> its COPY values
_DETAILS = COPY_COLUMNS.index("details")  # the one column wrapped (Jsonb) before dumping

# One statement updates every recorded dispute of a batch (no per-row round trips). The
# arrays travel as PostgreSQL array literals in single text parameters (built by
# array_literal): psycopg's per-element list dumping cost ~13 us per value, about 10% of a
# firing's client CPU.
BULK_UPDATE = sa.text(
    """
    UPDATE escalation_state AS s
       SET tier = v.tier, status = v.status, due_at = v.due_at,
           entered_tier_at = v.entered_tier_at, last_seq = v.last_seq,
           last_hash = decode(v.last_hash, 'hex'), updated_at = clock_timestamp(),
           regulatory_deadline = v.regulatory_deadline
      FROM unnest(CAST(CAST(:ids AS text) AS uuid[]), CAST(CAST(:tiers AS text) AS text[]),
                  CAST(CAST(:statuses AS text) AS text[]),
                  CAST(CAST(:due AS text) AS timestamptz[]),
                  CAST(CAST(:entered AS text) AS timestamptz[]),
                  CAST(CAST(:seqs AS text) AS bigint[]), CAST(CAST(:hashes AS text) AS text[]),
                  CAST(CAST(:deadlines AS text) AS timestamptz[]))
           AS v(dispute_id, tier, status, due_at, entered_tier_at, last_seq, last_hash,
                regulatory_deadline)
     WHERE s.dispute_id = v.dispute_id
    """
)


def _quote(value: object) -> str:
    """One element of a PostgreSQL array literal: NULL, or a double-quoted escaped string."""
    kind = type(value)
    if kind is UUID or kind is int:  # digits, letters and '-': nothing to escape
        return '"' + str(value) + '"'
    if kind is datetime and isinstance(value, datetime):  # isoformat: digits and '-:.+T'
        return '"' + value.isoformat() + '"'
    if value is None:
        return "NULL"
    text = value.isoformat() if isinstance(value, datetime) else str(value)
    if '"' in text or "\\" in text:
        text = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + text + '"'


def reference_array_literal(values: Sequence[object]) -> str:
    """The definition of :func:`array_literal` (one :func:`_quote` per element); slower,
    kept as the reference the fast paths are tested against."""
    return "{" + ",".join(map(_quote, values)) + "}"


def array_literal(values: Sequence[object]) -> str:
    """``{"a","b",NULL}``: a PostgreSQL array literal (cast to the element type in SQL).

    The same text as :func:`reference_array_literal`, built per column instead of per
    element when every element has one exact type whose rendering needs no escaping
    (UUID, int, datetime -- the last also mixed with None -- or str without ``"`` and
    ``\\``), which is what the firing path's columns hold; anything else takes the
    reference. Never raises for the types :func:`_quote` accepts.
    """
    body = _plain_body(values) if values else ""
    return "{" + (reference_array_literal(values)[1:-1] if body is None else body) + "}"


def _plain_body(values: Sequence[Any]) -> str | None:
    """The inside of :func:`array_literal` for a non-empty column of one of its fast
    shapes, else None."""
    kinds = set(map(type, values))
    kind = next(iter(kinds)) if len(kinds) == 1 else None
    if kind is UUID or kind is int:  # digits, letters and '-': nothing to escape
        return '"' + '","'.join(map(str, values)) + '"'
    if kind is datetime:  # isoformat: digits and '-:.+T'
        return '"' + '","'.join([v.isoformat() for v in values]) + '"'
    if kind is str:
        joined = '","'.join(values)
        plain = "\\" not in joined and joined.count('"') == 2 * (len(values) - 1)
        return '"' + joined + '"' if plain else None
    if kind is type(None):
        return ",".join(["NULL"] * len(values))
    if kinds == _DATETIME_OR_NONE:
        return ",".join(["NULL" if v is None else '"' + v.isoformat() + '"' for v in values])
    return None


_DATETIME_OR_NONE = {datetime, type(None)}


def locked_states(result: sa.CursorResult[Any]) -> dict[UUID, dict[str, Any]]:
    """Projection rows of ``result`` as plain dicts by dispute id (``dict(zip(keys, row))``
    over plain rows: several times cheaper than ``dict(RowMapping)``; the rows are fetched
    at once, iterating fetches them one ``fetchone`` at a time)."""
    cols = list(result.keys())
    states = [dict(zip(cols, row, strict=True)) for row in result.all()]
    return {state["dispute_id"]: state for state in states}


def copy_ledger(conn: sa.Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Append ledger rows with ``COPY ... FROM STDIN`` inside ``conn``'s transaction.

    COPY is about 3x faster than executemany for a 500-row batch. It has no ON CONFLICT:
    a duplicate ``(dispute_id, seq)`` fails the whole transaction, which is right, since
    seq values are computed under the projection row locks and a clash means corruption.
    """
    driver = conn.connection.driver_connection  # the psycopg 3 Connection
    if driver is None:  # pragma: no cover - only after the connection was invalidated
        raise sa.exc.InvalidRequestError("connection has no live driver connection")
    cursor = driver.cursor()
    with driver_errors(), cursor, cursor.copy(COPY_SQL) as copy:
        copy.set_types(COPY_TYPES)
        for row in rows:
            values = _COPY_VALUES(row)  # one C call for the ~20 columns
            details = Jsonb(values[_DETAILS], _details_json)
            copy.write_row((*values[:_DETAILS], details, *values[_DETAILS + 1:]))


def _details_json(details: Any) -> bytes | str:
    """JSON text of a ledger row's ``details`` for its jsonb column: ``{}`` for the common
    empty dict (no ``json.dumps`` call per row), else ``json.dumps``, psycopg's default.

    Raises:
        TypeError: a value JSON cannot hold (as ``json.dumps``).
    """
    if type(details) is dict and not details:
        return b"{}"
    return json.dumps(details)


def unnest_params(moved: Mapping[UUID, Mapping[str, Any]]) -> dict[str, str]:
    """Array-literal parameters of :data:`BULK_UPDATE` (hashes as hex text)."""
    rows = list(moved.values())
    return {
        "ids": array_literal([r["dispute_id"] for r in rows]),
        "tiers": array_literal([r["tier"] for r in rows]),
        "statuses": array_literal([r["status"] for r in rows]),
        "due": array_literal([r["due_at"] for r in rows]),
        "entered": array_literal([r["entered_tier_at"] for r in rows]),
        "seqs": array_literal([r["last_seq"] for r in rows]),
        "hashes": array_literal([bytes(r["last_hash"]).hex() for r in rows]),
        "deadlines": array_literal([r["regulatory_deadline"] for r in rows]),
    }


def lock_one(conn: sa.Connection, dispute_id: UUID) -> dict[str, Any]:
    """The dispute's projection row, locked FOR UPDATE. Raises NotFound."""
    row = conn.execute(LOCK_ONE, {"id": dispute_id}).mappings().first()
    if row is None:
        raise NotFound(f"no escalation recorded for dispute {dispute_id}")
    return dict(row)


def last_calendar_version(conn: sa.Connection, state: Mapping[str, Any]) -> str | None:
    """The ``calendar_version`` of the chain head row of ``state`` (locked projection)."""
    return conn.execute(
        sa.select(escalation_audit.c.calendar_version).where(
            escalation_audit.c.dispute_id == state["dispute_id"],
            escalation_audit.c.seq == state["last_seq"],
            escalation_audit.c.chain_created_at == state["created_at"],
        )
    ).scalar()


# ---------------------------------------------------------------------- projection writes
# What each write appends: the ledger rows and projection changes of enqueue, decisions (the
# record rule, ``domain.record_rule``) and single events. Pure row building on plain dicts
# (projection rows as ``escalation_state`` columns), except :func:`append_row`, which writes
# one event inside the caller's transaction.
MUTABLE_STATE = frozenset(
    {
        "status",
        "tier",
        "ladder",
        "ladder_version",
        "due_at",
        "entered_tier_at",
        "materiality",
        "regulatory_deadline",
        "remaining_ms",
        "external_id",
        "deadlines",
        "obligations",
    }
)
"""Projection columns ``append_event(changes=...)`` may set."""


def enqueue_rows(
    esc: Escalation, actor: str, decided_at: datetime, calendar_version: str | None = None,
    extra: Mapping[str, object] | None = None,
) -> dict[str, Any]:
    """Projection row (seq 1) and its ENQUEUED ledger row for one new escalation.

    SLA timing (docs/sla.md): the row records ``calendar_version`` and, when the escalation
    has regulatory deadlines, all of them in ``details["deadlines"]`` (name -> ISO 8601 UTC).
    The projection row also holds the institution zone and calendar; ``extra``: more keys of the
    ENQUEUED row's details (provenance: attributes, each deadline's citation and rule, the
    deadline bounding the due time).

    The definition of the ENQUEUED row: the bulk write builds the same row through
    :func:`stage_line` (a template for this fixed shape, below), and the tests compare
    the two.
    """
    state: dict[str, Any] = {
        "dispute_id": esc.dispute_id,
        "external_id": esc.external_id,
        "source": esc.source,
        "status": Status.PENDING.value,
        "tier": esc.tier,
        "ladder": esc.ladder,
        "ladder_version": esc.ladder_version,
        "due_at": esc.due_at,
        "entered_tier_at": esc.entered_tier_at,
        "materiality": esc.materiality.amount,
        "source_hash": esc.source_hash,
        "trace_id": esc.trace_id,
        "regulatory_deadline": esc.regulatory_deadline,
        "deadlines": deadlines_json(esc.deadlines),
        "institution_tz": esc.institution_tz,
        "institution_calendar": esc.institution_calendar,
        "remaining_ms": None,
        "last_seq": 0,
        "last_hash": b"\x00" * 32,
    }
    ledger = chained_row(state, RowFacts(
        event="ENQUEUED",
        match_decision="ENQUEUED",
        actor=actor,
        decided_at=decided_at,
        from_tier=None,
        to_tier=esc.tier,
        due_at=esc.due_at,
        next_due_at=esc.due_at,
        calendar_version=calendar_version,
        details={
            "entered_tier_at": esc.entered_tier_at.isoformat(),  # SLA report: time in tier
            **({"deadlines": {n: at.isoformat() for n, at in esc.deadlines}}
               if esc.deadlines else {}),
            **(extra or {}),
        }))
    state["last_seq"] = 1
    state["last_hash"] = ledger["row_hash"]
    return {"state": state, "ledger": ledger}


def projection_head(state: Mapping[str, Any]) -> ProjectionHead:
    """The record rule's view of a locked projection row."""
    return ProjectionHead(
        status=status_of(state["status"]),
        last_seq=int(state["last_seq"]),
        tier=state["tier"],
        due_at=state["due_at"],
        regulatory_deadline=state["regulatory_deadline"],
    )


def apply_decisions(
    states: dict[UUID, dict[str, Any]],
    items: Sequence[tuple[ClaimedItem, Decision]],
    actor: str,
) -> tuple[list[RecordOutcome], list[dict[str, Any]], dict[UUID, dict[str, Any]]]:
    """Run the record rule (``domain.record_rule.plan_record``) per item against the locked
    ``states`` (mutated in place, so a dispute repeated in the batch sees its new head).

    Returns (outcomes in input order, ledger rows to insert, final state per moved dispute).
    """
    outcomes: list[RecordOutcome] = []
    ledger: list[dict[str, Any]] = []
    moved: dict[UUID, dict[str, Any]] = {}
    for claimed, decision in items:
        state = states.get(claimed.escalation.dispute_id)
        plan = plan_record(RecordRequest(
            None if state is None else projection_head(state), claimed.escalation.seq, decision))
        if state is None or plan.entry is None or plan.head is None:
            outcomes.append(RecordOutcome(
                plan.status, None if state is None else escalation_from_state(state)))
            continue
        entry, after = plan.entry, plan.head
        state["regulatory_deadline"] = after.regulatory_deadline
        row = chained_row(state, RowFacts(
            event=entry.event,
            match_decision=entry.match_decision,
            actor=actor,
            decided_at=entry.decided_at,
            from_tier=entry.from_tier,
            to_tier=entry.to_tier,
            due_at=entry.due_at,
            next_due_at=entry.next_due_at,
            fence_token=claimed.token,
            calendar_version=entry.calendar_version,
            details=({"deadline": decision.deadline_detail}
                     if decision.deadline_detail is not None else None)))
        ledger.append(row)
        state.update(
            tier=after.tier,
            status=after.status.value,
            due_at=after.due_at,
            entered_tier_at=plan.entered_tier_at,
            last_seq=row["seq"],
            last_hash=row["row_hash"],
        )
        moved[state["dispute_id"]] = state
        outcomes.append(RecordOutcome(RecordStatus.RECORDED, escalation_from_state(state)))
    return outcomes, ledger, moved


def clean_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Validate and normalise ``append_event`` changes. Raises InvalidInput."""
    unknown = set(changes) - MUTABLE_STATE
    if unknown:
        raise InvalidInput(f"cannot change projection column(s) {sorted(unknown)}")
    clean = dict(changes)
    if "status" in clean:
        clean["status"] = str(Status(clean["status"]).value)
        if clean["status"] not in STATUSES:  # pragma: no cover - Status mirrors STATUSES
            raise InvalidInput(f"unknown status {clean['status']!r}")
    if "materiality" in clean:
        clean["materiality"] = Materiality.parse(clean["materiality"]).amount
    for name in ("due_at", "entered_tier_at", "regulatory_deadline"):
        if clean.get(name) is not None:
            clean[name] = require_aware(clean[name], name)
    for name in ("deadlines", "obligations"):  # ((name, aware instant), ...) -> JSON array
        if name in clean:  # decoded: the JSONB column type encodes it (text became a string)
            text = deadlines_json(tuple(clean[name] or ()))
            clean[name] = None if text is None else json.loads(text)
    return clean


def append_row(conn: sa.Connection, state: dict[str, Any], entry: LedgerEvent) -> Escalation:
    """Append ``entry``'s chained ledger row for ``state`` (locked) and apply its
    ``changes`` (``entry.dispute_id`` and ``entry.expected_seq`` are the caller's: ``state``
    is the row it locked and checked)."""
    changes = entry.changes
    before = dict(state)
    after = {**state, **changes}
    if after["status"] != Status.PENDING.value and "due_at" not in changes:
        after["due_at"] = None
    if after["status"] == Status.PENDING.value and after["due_at"] is None:
        raise InvalidInput("a pending escalation needs due_at")
    row = chained_row(after, RowFacts(
        event=entry.event,
        match_decision=entry.match_decision,
        actor=entry.actor,
        decided_at=entry.decided_at,
        from_tier=before["tier"],
        to_tier=after["tier"],
        due_at=before["due_at"],
        next_due_at=after["due_at"],
        calendar_version=entry.calendar_version,
        details=entry.details))
    conn.execute(sa.insert(escalation_audit), [row])
    values = {k: after[k] for k in MUTABLE_STATE}
    values.update(last_seq=row["seq"], last_hash=row["row_hash"])
    conn.execute(
        sa.update(_S)
        .where(_S.c.dispute_id == state["dispute_id"])
        .values(**values, updated_at=sa.func.clock_timestamp())
    )
    after.update(last_seq=row["seq"], last_hash=row["row_hash"])
    return escalation_from_state(after)


# ---------------------------------------------------------------------- ENQUEUED staging
# The bulk ENQUEUED write: one ``COPY`` into a session staging table, then one statement
# that inserts the new projection rows and their ENQUEUED ledger rows.
#
# Why not the general row builders (:func:`enqueue_rows` + :func:`chained_row`, above) and
# ``unnest`` parameters: the values reach PostgreSQL as one COPY text block built here
# instead of psycopg's per-element array dumping. The hashed bytes are the one renderer's,
# ``domain.audit_hash.canonical_bytes``: :func:`enqueued_canonical_bytes` only builds the
# ENQUEUED row's fields from an escalation and hands them to it (the property tests compare
# those fields and bytes with :func:`enqueue_rows`'). :class:`EnqueuedLineTemplate` keeps,
# for an import's rows of one shape, the parts of those bytes and of the COPY line that do
# not change from row to row: it renders nothing of its own. Its constant pieces are cut out
# of ``canonical_bytes``' output; each per-row value is filled in as the domain renders that
# value (``audit_hash.canonical_string``, ``audit_hash.canonical_json``), which is what
# ``canonical_bytes`` writes for it inside the row (a JSON object's text is its members'
# texts in key order); and the result is checked against :func:`stage_line` when the
# template is made. It stays for speed: about 3 us per row instead of about 16 us through
# ``canonical_bytes`` (docs/adr/0008-csv-import-two-streaming-passes.md, "Amendment 2").
GENESIS_HEX = audit_hash.GENESIS.hex()
canonical_string = audit_hash.canonical_string
"""A string's canonical JSON text, as ``canonical_bytes`` writes it (the domain's)."""

STAGE_TABLE = "escalation_enqueue_stage"
# Session-local (TEMP) and emptied at each commit; PostgreSQL skips the truncation in
# transactions that did not touch a temporary table, so other transactions pay nothing.
CREATE_STAGE = (
    f"CREATE TEMP TABLE IF NOT EXISTS {STAGE_TABLE} ("
    "dispute_id uuid, external_id text, tier text, ladder text, "
    "ladder_version integer, due_at timestamptz, entered_tier_at timestamptz, "
    "materiality numeric(18,2), source_hash text, trace_id text, "
    "regulatory_deadline timestamptz, deadlines jsonb, institution_tz text, "
    "institution_calendar text, calendar_version text, decided_at timestamptz, "
    "details jsonb, row_hash bytea) ON COMMIT DELETE ROWS"
)
STAGE_COLUMNS = (
    "dispute_id", "external_id", "tier", "ladder", "ladder_version", "due_at",
    "entered_tier_at", "materiality", "source_hash", "trace_id", "regulatory_deadline",
    "deadlines", "institution_tz", "institution_calendar", "calendar_version", "decided_at",
    "details", "row_hash",
)
COPY_STAGE = f"COPY {STAGE_TABLE} ({', '.join(STAGE_COLUMNS)}) FROM STDIN"

# The projection rows first (sorted by dispute id, like every lock taken on it: no deadlock
# between concurrent batches); ``created_at`` (database clock) is the chain's partition key,
# which the ledger row copies. Only the disputes inserted now get their ENQUEUED row.
INSERT_FROM_STAGE = f"""
WITH ins AS (
  INSERT INTO escalation_state (dispute_id, external_id, source, status, tier, ladder,
      ladder_version, due_at, entered_tier_at, materiality, source_hash, trace_id,
      regulatory_deadline, deadlines, institution_tz, institution_calendar, remaining_ms,
      last_seq, last_hash)
  SELECT dispute_id, external_id, details ->> 'source', %(status)s, tier, ladder,
         ladder_version, due_at,
         entered_tier_at, materiality, source_hash, trace_id, regulatory_deadline, deadlines,
         institution_tz, institution_calendar, NULL, 1, row_hash
    FROM {STAGE_TABLE} ORDER BY dispute_id
  ON CONFLICT (dispute_id) DO NOTHING
  RETURNING dispute_id, created_at
)
INSERT INTO escalation_audit (dispute_id, seq, event, match_decision, from_tier, to_tier,
    ladder, ladder_version, calendar_version, materiality, due_at, next_due_at,
    regulatory_deadline, decided_at, actor, trace_id, source_hash, external_id, fence_token,
    details, prev_hash, row_hash, chain_created_at)
SELECT s.dispute_id, 1, 'ENQUEUED', 'ENQUEUED', NULL, s.tier, s.ladder, s.ladder_version,
       s.calendar_version, s.materiality, s.due_at, s.due_at, s.regulatory_deadline,
       s.decided_at, %(actor)s, s.trace_id, s.source_hash, s.external_id, NULL, s.details,
       decode('{GENESIS_HEX}', 'hex'), s.row_hash, ins.created_at
  FROM ins JOIN {STAGE_TABLE} AS s USING (dispute_id)
RETURNING dispute_id
"""


def enqueued_details(esc: Escalation, extra: Mapping[str, object] | None) -> dict[str, Any]:
    """The ENQUEUED row's ``details`` (as :func:`enqueue_rows` builds them): the
    tier entry time, every regulatory deadline, then ``extra`` (provenance)."""
    details: dict[str, Any] = {"entered_tier_at": esc.entered_tier_at.isoformat()}
    if esc.deadlines:
        details["deadlines"] = {n: at.isoformat() for n, at in esc.deadlines}
    if extra:
        details.update(extra)
    return details


def enqueued_canonical_bytes(
    esc: Escalation, actor: str, decided_at: datetime, calendar_version: str | None,
    details: Mapping[str, Any],
) -> bytes:
    """``audit_hash.canonical_bytes`` of the ENQUEUED ledger row of ``esc`` (seq 1).

    Raises:
        InvalidInput: a value with no canonical form.
    """
    return audit_hash.canonical_bytes(
        _ledger_fields(esc, actor, decided_at, calendar_version, details))


def _stage_details_json(details: Mapping[str, Any]) -> str:
    """The staging table's ``details`` text (stored as JSONB: key order and spacing do not
    matter; plain JSON compact and sorted, so a template cuts it out whole)."""
    if audit_hash.is_canonical_json(details):
        try:
            return orjson.dumps(details, option=orjson.OPT_SORT_KEYS).decode("utf-8")
        except orjson.JSONEncodeError:  # an integer beyond 64 bits, a lone surrogate
            return json.dumps(details, sort_keys=True, separators=(",", ":"),
                              ensure_ascii=False)
    return json.dumps(details, ensure_ascii=False)


def _ledger_fields(
    esc: Escalation, actor: str, decided_at: datetime, calendar_version: str | None,
    details: Mapping[str, Any],
) -> dict[str, Any]:
    """The hashed fields of the ENQUEUED row, as :func:`chained_row` builds them."""
    return {
        "dispute_id": esc.dispute_id, "seq": 1, "event": "ENQUEUED",
        "match_decision": "ENQUEUED", "from_tier": None, "to_tier": esc.tier,
        "ladder": esc.ladder, "ladder_version": int(esc.ladder_version),
        "calendar_version": calendar_version, "materiality": Decimal(esc.materiality.amount),
        "due_at": esc.due_at, "next_due_at": esc.due_at,
        "regulatory_deadline": (None if esc.regulatory_deadline is None
                                else esc.regulatory_deadline.astimezone(UTC)),
        "decided_at": decided_at, "actor": actor, "trace_id": esc.trace_id,
        "source_hash": esc.source_hash, "external_id": esc.external_id, "fence_token": None,
        "details": dict(details),
    }


def enqueued_row_hash(
    esc: Escalation, actor: str, decided_at: datetime, calendar_version: str | None,
    details: Mapping[str, Any],
) -> bytes:
    """``row_hash`` of the ENQUEUED row: SHA-256(GENESIS || canonical bytes), 32 bytes."""
    return hashlib.sha256(audit_hash.GENESIS + enqueued_canonical_bytes(
        esc, actor, decided_at, calendar_version, details)).digest()


# COPY text format: backslash, tab, newline and carriage return are escaped; \N is NULL.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_text(value: str | None) -> str:
    return "\\N" if value is None else value.translate(_COPY_ESCAPES)


def _copy_time(value: datetime | None) -> str:
    return "\\N" if value is None else value.isoformat()


def stage_line(
    esc: Escalation, actor: str, decided_at: datetime, calendar_version: str | None,
    extra: Mapping[str, object] | None,
) -> tuple[str, bytes]:
    """(the staging table's COPY text line of ``esc``, its ENQUEUED ``row_hash``)."""
    details = enqueued_details(esc, extra)
    canonical = enqueued_canonical_bytes(esc, actor, decided_at, calendar_version, details)
    digest = hashlib.sha256(audit_hash.GENESIS + canonical).digest()
    details_json = _stage_details_json(details)
    deadlines = (None if not esc.deadlines else json.dumps(
        [[n, at.isoformat()] for n, at in esc.deadlines]))
    line = "\t".join((
        str(esc.dispute_id), _copy_text(esc.external_id), _copy_text(esc.tier),
        _copy_text(esc.ladder), str(int(esc.ladder_version)), esc.due_at.isoformat(),
        esc.entered_tier_at.isoformat(), format(esc.materiality.amount, "f"),
        _copy_text(esc.source_hash), _copy_text(esc.trace_id),
        _copy_time(esc.regulatory_deadline), _copy_text(deadlines),
        _copy_text(esc.institution_tz), _copy_text(esc.institution_calendar),
        _copy_text(calendar_version), decided_at.isoformat(),
        _copy_text(details_json),
        "\\\\x" + digest.hex(),
    ))
    return line + "\n", digest


def insert_staged(conn: sa.Connection, lines: Sequence[str], actor: str) -> set[UUID]:
    """COPY ``lines`` (from :func:`stage_line`) into the session's staging table and insert
    the disputes that have no projection row yet (projection + ENQUEUED row), inside
    ``conn``'s transaction. Returns the dispute ids inserted now."""
    driver = conn.connection.driver_connection  # the psycopg 3 Connection
    if driver is None:  # pragma: no cover - only after the connection was invalidated
        raise sa.exc.InvalidRequestError("connection has no live driver connection")
    with driver_errors(), driver.cursor() as cur:
        cur.execute(CREATE_STAGE)
        with cur.copy(COPY_STAGE) as copy:
            copy.write("".join(lines))
        cur.execute(INSERT_FROM_STAGE,
                    {"status": Status.PENDING.value, "actor": actor})
        return {row[0] for row in cur.fetchall()}


# ---------------------------------------------------------------------- row templates
# Sentinels standing for the per-row values while a template is cut out of the reference
# rendering; a template is only used when each occurs exactly once and the template renders
# the prototype row byte for byte as :func:`stage_line` does.
_SENTINEL_ID = UUID("00000000-5e17-4e15-8000-0000000d1d00")
_SENTINEL_EXT = "Xq7SENTINELEXTERNALq7X"
_SENTINEL_HASH = "abcdef0123456789fedcba9876543210deadbeef"
_SENTINEL_TRACE = "Xq7SENTINELTRACEq7X"
_SENTINEL_ATTRS = "Xq7SENTINELATTRIBUTESq7X"
_ATTRIBUTES = "source_attributes"
"""The ENQUEUED details key of the source attributes (``domain.source_attributes.FIELD``)."""


def _cut(text: str, marks: Sequence[str]) -> list[str] | None:
    """``text`` split at each of ``marks`` (in order, each exactly once), or None."""
    pieces: list[str] = []
    rest = text
    for mark in marks:
        if text.count(mark) != 1:
            return None
        head, sep, rest = rest.partition(mark)
        if not sep:
            return None
        pieces.append(head)
    pieces.append(rest)
    return pieces


class EnqueuedLineTemplate:
    """The staging COPY line (:func:`stage_line`) of every escalation that differs from a
    prototype only in its dispute id, external id, source hash, trace id and source
    attributes (``details.source_attributes``, ``domain.source_attributes``): the rest of
    the line and of the hashed canonical bytes is rendered once, so a row costs a few string
    joins, one small JSON rendering when it has source attributes and one SHA-256 (about
    3 us instead of about 16 us).

    Byte identity: the constant parts are cut out of :func:`stage_line`'s own rendering of
    the prototype with sentinel values, and :meth:`render` of the prototype's real values
    (with and without source attributes) is checked against :func:`stage_line` when the
    template is made; a prototype whose row does not fit (details outside plain JSON, a
    sentinel colliding with another value) gets ``ok = False`` and every row is then
    rendered by :func:`stage_line` itself.
    """

    def __init__(self, proto: Escalation, actor: str, decided_at: datetime,
                 calendar_version: str | None, extra: Mapping[str, object] | None) -> None:
        """``proto``: a validated pending escalation; the other arguments as for
        :func:`stage_line` (``extra`` without source attributes: they are each row's).
        Until :meth:`prepare` has run, rows are rendered by :func:`stage_line` itself (a
        shape seen once pays nothing for the template)."""
        self._proto = proto
        self._args = (actor, decided_at, calendar_version, extra)
        self._cuts: dict[bool, tuple[list[str], list[str]]] = {}
        self.ok = False

    def prepare(self) -> None:
        """Cut the template out (about ten :func:`stage_line` renderings); sets ``ok``."""
        proto = self._proto
        for per_row in (False, True):
            cut = self._cut_out(per_row)
            if cut is None:
                return
            self._cuts[per_row] = cut
        did = str(proto.dispute_id)
        self.ok = all(
            self._fill(did, ext, proto.source_hash, proto.trace_id, attrs)
            == self._reference(did, ext, proto.source_hash, proto.trace_id, attrs)
            for ext in (proto.external_id, None, "x\t\\y\"z\u00e9")
            for attrs in (None, {"Product": "Credit card", "Company": "A \"B\"\\C\u00e9"}))

    def _cut_out(self, per_row: bool) -> tuple[list[str], list[str]] | None:
        """(canonical bytes' pieces, COPY line's pieces) around the per-row values, with
        (``per_row``) or without source attributes; None when the row does not fit."""
        actor, decided_at, calendar_version, extra = self._args
        if per_row:
            extra = {**(extra or {}), _ATTRIBUTES: _SENTINEL_ATTRS}
        marked = replace(self._proto, dispute_id=_SENTINEL_ID, source_hash=_SENTINEL_HASH,
                         trace_id=_SENTINEL_TRACE, external_id=_SENTINEL_EXT)
        details = enqueued_details(marked, extra)
        if not audit_hash.is_canonical_json(details):  # values of other types: no template
            return None
        canonical = enqueued_canonical_bytes(marked, actor, decided_at, calendar_version,
                                             details)
        line, digest = stage_line(marked, actor, decided_at, calendar_version, extra)
        attrs = (canonical_string(_SENTINEL_ATTRS),) if per_row else ()
        # canonical keys are sorted: ``details`` comes before ``dispute_id``
        canon = _cut(canonical.decode("utf-8"), (
            *attrs, str(_SENTINEL_ID), canonical_string(_SENTINEL_EXT),
            canonical_string(_SENTINEL_HASH), canonical_string(_SENTINEL_TRACE)))
        cut = _cut(line, (str(_SENTINEL_ID), _SENTINEL_EXT, _SENTINEL_HASH, _SENTINEL_TRACE,
                          *attrs, digest.hex()))
        if canon is None or cut is None:
            return None
        return canon, cut

    def _reference(self, dispute_id: str, external_id: str | None, source_hash: str,
                   trace_id: str, attributes: Mapping[str, str] | None = None) -> str:
        """:func:`stage_line` of the prototype with the given per-row values."""
        esc = replace(self._proto, dispute_id=UUID(dispute_id), external_id=external_id,
                      source_hash=source_hash, trace_id=trace_id)
        actor, decided_at, calendar_version, extra = self._args
        if attributes:
            extra = {**(extra or {}), _ATTRIBUTES: dict(attributes)}
        return stage_line(esc, actor, decided_at, calendar_version, extra)[0]

    def render(self, dispute_id: str, external_id: str | None, source_hash: str,
               trace_id: str, attributes: Mapping[str, str] | None = None) -> str:
        """The COPY line (with its newline) of the prototype with these per-row values.

        ``dispute_id``: the canonical UUID string (``str(UUID)``); ``source_hash``: lower
        hex (as validated); ``trace_id``: 1-64 characters without control characters;
        ``attributes``: the row's checked source attributes (None or empty: none).
        """
        if not self.ok:
            return self._reference(dispute_id, external_id, source_hash, trace_id, attributes)
        return self._fill(dispute_id, external_id, source_hash, trace_id, attributes)

    def _fill(self, dispute_id: str, external_id: str | None, source_hash: str,
              trace_id: str, attributes: Mapping[str, str] | None = None) -> str:
        """The template filled in (no check)."""
        if external_id is None:
            ext_json, ext_copy = "null", "\\N"
        else:
            ext_json, ext_copy = canonical_string(external_id), _copy_text(external_id)
        hash_json = canonical_string(source_hash)
        trace_json = canonical_string(trace_id)
        if not attributes:
            c, ln = self._cuts[False]
            canonical = "".join((c[0], dispute_id, c[1], ext_json, c[2], hash_json, c[3],
                                 trace_json, c[4]))
            digest = hashlib.sha256(_GENESIS + canonical.encode("utf-8")).hexdigest()
            return "".join((ln[0], dispute_id, ln[1], ext_copy, ln[2],
                            _copy_text(source_hash), ln[3], _copy_text(trace_id), ln[4],
                            digest, ln[5]))
        c, ln = self._cuts[True]
        attrs_json = audit_hash.canonical_json(attributes)
        canonical = "".join((c[0], attrs_json, c[1], dispute_id, c[2], ext_json, c[3],
                             hash_json, c[4], trace_json, c[5]))
        digest = hashlib.sha256(_GENESIS + canonical.encode("utf-8")).hexdigest()
        return "".join((ln[0], dispute_id, ln[1], ext_copy, ln[2], _copy_text(source_hash),
                        ln[3], _copy_text(trace_id), ln[4], _copy_text(attrs_json), ln[5],
                        digest, ln[6]))


_GENESIS = audit_hash.GENESIS

INSERT_FROM_STAGE_TEXT_IDS = INSERT_FROM_STAGE.replace(
    "RETURNING dispute_id\n", "RETURNING dispute_id::text\n")


def insert_staged_ids(conn: sa.Connection, block: str, actor: str) -> set[str]:
    """:func:`insert_staged` of a block of COPY lines already joined; returns the dispute ids
    inserted now as canonical UUID strings (no UUID objects are built)."""
    driver = conn.connection.driver_connection
    if driver is None:  # pragma: no cover - only after the connection was invalidated
        raise sa.exc.InvalidRequestError("connection has no live driver connection")
    with driver_errors(), driver.cursor() as cur:
        cur.execute(CREATE_STAGE)
        with cur.copy(COPY_STAGE) as copy:
            copy.write(block)
        cur.execute(INSERT_FROM_STAGE_TEXT_IDS,
                    {"status": Status.PENDING.value, "actor": actor})
        return {row[0] for row in cur.fetchall()}


class PostgresAuditStore(AuditQueries):
    """The PostgreSQL audit log (implements ``escalation.ports.AuditLog``).

    Args:
        engine: a psycopg 3 engine (``escalation.adapters.db.make_engine``) on a database at
            the Alembic head. The store opens one short transaction per call.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    # ------------------------------------------------------------------ enqueue
    def record_enqueue(
        self, escalation: Escalation, actor: str, decided_at: datetime | None = None
    ) -> tuple[bool, Escalation]:
        """Record a new escalation: projection row + ENQUEUED ledger row (seq 1).

        Idempotent per dispute: if the dispute already has a projection row, nothing is
        written and ``(False, <its current state>)`` is returned (whatever its status).

        Args:
            escalation: validated escalation (``Escalation.new``), status pending.
            actor: who enqueued (service name, admin, worker id).
            decided_at: aware UTC time of the enqueue decision; default ``entered_tier_at``.

        Returns:
            ``(True, escalation at seq 1)`` when recorded now, else ``(False, current)``.

        Raises:
            InvalidInput: naive ``decided_at`` or a non-pending escalation.
        """
        return self.record_enqueue_many([escalation], actor, decided_at)[0]

    def record_enqueue_many(
        self, escalations: Sequence[Escalation], actor: str, decided_at: datetime | None = None,
        calendar_versions: Mapping[UUID, str] | None = None,
        details: Mapping[UUID, Mapping[str, object]] | None = None,
    ) -> list[tuple[bool, Escalation]]:
        """:meth:`record_enqueue` for a batch, in one transaction and at most three statements.

        One ``COPY`` of the rows into a session staging table, one statement inserting the
        projection rows that do not exist yet (``ON CONFLICT DO NOTHING``) and the ENQUEUED
        ledger rows of those, one SELECT for the states of the disputes that already
        existed (:func:`insert_staged`, "ENQUEUED staging" above).

        Returns one ``(recorded, state)`` per input, in input order; a dispute repeated in
        the batch is recorded once, from its first occurrence (its later occurrences return
        ``False`` and the state that first occurrence recorded).
        ``calendar_versions`` (optional): dispute id -> version of the calendar its due
        time was counted in, recorded in the ENQUEUED row's ``calendar_version``.
        ``details`` (optional): dispute id -> extra keys of the ENQUEUED row's ``details``.

        Raises:
            InvalidInput: a non-pending escalation or a naive ``decided_at``; nothing written.
        """
        if not escalations:
            return []
        when = None if decided_at is None else require_aware(decided_at, "decided_at")
        firsts = _stage_lines(escalations, actor, when, calendar_versions or {}, details or {})
        with self._engine.begin() as conn:
            inserted = insert_staged(conn, list(firsts.values()), actor)
            others = [d for d in firsts if d not in inserted]
            existing = _states_of(conn, others) if others else {}
        return _enqueue_results(escalations, inserted, existing)

    def enqueued_line_template(
        self, proto: Escalation, actor: str, decided_at: datetime,
        calendar_version: str | None, details: Mapping[str, object] | None,
    ) -> EnqueuedLineTemplate:
        """The staging-line template (:class:`EnqueuedLineTemplate`) of ``proto``'s ENQUEUED
        row, for :meth:`record_staged` (the CSV import's bulk path).

        Raises:
            InvalidInput: ``proto`` is not pending, or ``decided_at`` is naive.
        """
        if proto.status is not Status.PENDING:
            raise InvalidInput(f"only a pending escalation can be enqueued ({proto.status})")
        return EnqueuedLineTemplate(proto, actor, require_aware(decided_at, "decided_at"),
                                    calendar_version, details)

    def record_staged(self, lines: Sequence[str], actor: str) -> set[str]:
        """:meth:`record_enqueue_many` of rows already rendered as staging lines (by
        :meth:`enqueued_line_template`; at most one line per dispute), in one transaction:
        returns the dispute ids (canonical UUID strings) recorded now; the others already
        had a projection row and are left as they are."""
        if not lines:
            return set()
        with self._engine.begin() as conn:
            return insert_staged_ids(conn, "".join(lines), actor)

    # ------------------------------------------------------------------ decisions
    def record_decisions(
        self, items: Sequence[tuple[ClaimedItem, Decision]], actor: str
    ) -> list[RecordOutcome]:
        """Record a batch of promote/terminal decisions: the commit point of a firing.

        One transaction: lock the projection rows (``FOR UPDATE``, ordered by dispute id so
        concurrent workers cannot deadlock), then per item in input order:

        * no projection row -> ``UNKNOWN`` (state None);
        * terminal or cancelled -> ``CLOSED``;
        * paused, or ``last_seq`` != the claimed payload's ``seq`` -> ``STALE`` (a newer
          decision exists; the returned state is what the caller should apply);
        * else append a PROMOTED/TERMINAL ledger row (seq + 1, ``fence_token`` = claim
          token, chained hash) and move the projection -> ``RECORDED``.

        Ledger rows go in with one ``COPY``, projection updates with one
        ``UPDATE ... FROM unnest(...)`` (about 50 ms for 500 items on a 2-core machine).
        Repeating a batch writes nothing (all STALE).

        Returns:
            One :class:`RecordOutcome` per item, in input order, with the state PostgreSQL
            holds after the transaction.

        Raises:
            InvalidInput: a NOT_DUE decision, a promotion without ``next_due_at``, or a
                naive datetime. Nothing is written.
        """
        if not items:
            return []
        for _claimed, decision in items:
            check_recordable(decision)
        ids = sorted({claimed.escalation.dispute_id for claimed, _ in items})
        with self._engine.begin() as conn:
            states = locked_states(conn.execute(LOCK_MANY, {"ids": ids}))
            outcomes, ledger, moved = apply_decisions(states, items, actor)
            if ledger:
                copy_ledger(conn, ledger)
                conn.execute(BULK_UPDATE, unnest_params(moved))
        return outcomes

    # ------------------------------------------------------------------ single events
    def record_cancel(
        self, dispute_id: UUID, actor: str, decided_at: datetime, reason: str
    ) -> Escalation:
        """Cancel an escalation (the dispute was resolved): a CANCELLED ledger row.

        Idempotent: cancelling an already-cancelled escalation writes nothing and returns it.

        Raises:
            NotFound: no escalation for ``dispute_id``.
            ConflictError: the escalation already reached its terminal tier (the message
                names ``resolve``), or was resolved.
            InvalidInput: naive ``decided_at``.
        """
        require_aware(decided_at, "decided_at")
        with self._engine.begin() as conn:
            state = lock_one(conn, dispute_id)
            if state["status"] == Status.CANCELLED.value:
                return escalation_from_state(state)
            if state["status"] == Status.TERMINAL.value:
                raise ConflictError(
                    f"dispute {dispute_id} already reached terminal escalation in tier "
                    f"{state['tier']!r}; it cannot be cancelled: record its resolution with "
                    "resolve (an outcome code)"
                )
            if state["status"] == Status.RESOLVED.value:
                raise ConflictError(f"dispute {dispute_id} is already resolved; it cannot be "
                                    "cancelled")
            return append_row(conn, state, LedgerEvent(
                dispute_id,
                event="CANCELLED",
                match_decision="CANCELLED",
                actor=actor,
                decided_at=decided_at,
                changes={"status": Status.CANCELLED.value},
                details={"reason": reason},
                # the calendar the escalation was counting in (its last row's), so every
                # row of the chain names one
                calendar_version=last_calendar_version(conn, state)))

    def record_stuck(
        self,
        dispute_id: UUID,
        actor: str,
        decided_at: datetime,
        details: Mapping[str, Any] | None = None,
    ) -> Escalation | None:
        """Record a STUCK_MEMBER (a Redis member without payload) on the dispute's chain.

        The projection is unchanged except for its chain head. Returns the state, or None
        (nothing written) when PostgreSQL has no escalation for ``dispute_id``: with no
        chain to extend there is nothing to record; the caller logs the anomaly.
        """
        require_aware(decided_at, "decided_at")
        with self._engine.begin() as conn:
            try:
                state = lock_one(conn, dispute_id)
            except NotFound:
                return None
            return append_row(conn, state, LedgerEvent(
                dispute_id,
                event="STUCK_MEMBER",
                match_decision="STUCK_MEMBER",
                actor=actor,
                decided_at=decided_at,
                changes={},
                details=details or {}))

    def append_event(self, entry: LedgerEvent) -> Escalation:
        """Append ``entry``'s ledger row and apply its ``changes`` to the projection, in one
        transaction.

        The generic verb behind pause, resume, ladder migration, warnings, dead letters.
        The ledger row's ``from_tier``/``due_at`` are the values before, ``to_tier``/
        ``next_due_at``/``ladder``/``ladder_version`` the values after the change.

        ``entry`` (:class:`escalation.ports.LedgerEvent`):

        Args:
            event: one of ``tables.LEDGER_EVENTS``.
            changes: projection columns to set (keys from :data:`MUTABLE_STATE`; ``status``
                as ``Status`` or str, ``materiality`` as Materiality/Decimal). A status other
                than pending clears ``due_at`` unless ``changes`` sets it.
            details: JSON object stored (and hashed) with the row; no floats.
            expected_seq: if given, the projection's ``last_seq`` must equal it (CAS).

        Raises:
            NotFound: no escalation for ``dispute_id``.
            ConflictError: ``expected_seq`` differs from the projection's ``last_seq``.
            DuplicateEvent: a unique index refused the row (e.g. a WARNING already recorded
                for the same dispute, tier seq and fraction); nothing written.
            InvalidInput: unknown event or column, bad status, naive datetime, float.
        """
        dispute_id, event, expected_seq = entry.dispute_id, entry.event, entry.expected_seq
        decided_at, changes = entry.decided_at, entry.changes
        if event not in LEDGER_EVENTS:
            raise InvalidInput(f"unknown ledger event {event!r}; expected one of {LEDGER_EVENTS}")
        require_aware(decided_at, "decided_at")
        clean = clean_changes(changes)
        try:
            with self._engine.begin() as conn:
                state = lock_one(conn, dispute_id)
                if expected_seq is not None and int(state["last_seq"]) != expected_seq:
                    raise ConflictError(
                        f"dispute {dispute_id} is at seq {state['last_seq']}, "
                        f"expected {expected_seq}"
                    )
                return append_row(conn, state, replace(entry, changes=clean))
        except sa.exc.IntegrityError as exc:
            if not isinstance(exc.orig, UniqueViolation):
                raise
            raise DuplicateEvent(
                f"dispute {dispute_id}: the ledger already holds this {event} event"
            ) from None


# ---------------------------------------------------------------------- enqueue steps
def _stage_lines(
    escalations: Sequence[Escalation], actor: str, when: datetime | None,
    calendar_versions: Mapping[UUID, str],
    details: Mapping[UUID, Mapping[str, object]],
) -> dict[UUID, str]:
    """Staging COPY line of each dispute's first occurrence in the batch.

    Raises:
        InvalidInput: an escalation that is not pending (checked before anything is built).
    """
    firsts: dict[UUID, str] = {}
    for esc in escalations:
        if esc.status is not Status.PENDING:
            raise InvalidInput(f"only a pending escalation can be enqueued ({esc.status})")
        d = esc.dispute_id
        if d not in firsts:
            firsts[d] = stage_line(esc, actor, when or esc.entered_tier_at,
                                   calendar_versions.get(d), details.get(d))[0]
    return firsts


def _states_of(conn: sa.Connection, ids: Sequence[UUID]) -> dict[UUID, Escalation]:
    """Current projection states of ``ids`` (those that exist)."""
    rows = conn.execute(SELECT_MANY, {"ids": list(ids)}).mappings()
    return {row["dispute_id"]: escalation_from_state(row) for row in rows}


def _enqueue_results(
    escalations: Sequence[Escalation], inserted: set[UUID], existing: Mapping[UUID, Escalation]
) -> list[tuple[bool, Escalation]]:
    """``(recorded now, state)`` per input; only a dispute's first occurrence is recorded,
    and its later occurrences are answered with the state that first one recorded."""
    out: list[tuple[bool, Escalation]] = []
    now_recorded: dict[UUID, Escalation] = {}
    for esc in escalations:
        d = esc.dispute_id
        if d in inserted:
            state = now_recorded.get(d)
            if state is None:
                now_recorded[d] = state = _recorded(esc)
                out.append((True, state))
            else:
                out.append((False, state))
        else:
            out.append((False, existing.get(d) or esc.with_changes(seq=1)))
    return out


def _recorded(esc: Escalation) -> Escalation:
    """``esc`` (pending, checked by ``_stage_lines``) at seq 1: the state just recorded
    (a direct construction: ``dataclasses.replace`` costs several times more per row)."""
    return Escalation(
        dispute_id=esc.dispute_id, tier=esc.tier, due_at=esc.due_at,
        materiality=esc.materiality, source_hash=esc.source_hash, ladder=esc.ladder,
        ladder_version=esc.ladder_version, seq=1, entered_tier_at=esc.entered_tier_at,
        trace_id=esc.trace_id, external_id=esc.external_id,
        regulatory_deadline=esc.regulatory_deadline, status=Status.PENDING,
        deadlines=esc.deadlines, institution_tz=esc.institution_tz,
        institution_calendar=esc.institution_calendar, source=esc.source)
