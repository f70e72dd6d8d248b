"""SQL of the audit store's writes: statements, array-literal parameters, COPY, row locks.

Kept apart from ``audit_store`` (the transactions) and ``audit_writes`` (what each write
appends): this module only knows how rows reach PostgreSQL. Also used by
``ladder_history`` (the ladder migration's batched ledger writes).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from psycopg.types.json import Jsonb
from sqlalchemy.dialects import postgresql as pg

from escalation.adapters.db import driver_errors
from escalation.adapters.tables import escalation_audit, escalation_state
from escalation.domain.errors import NotFound

_S = escalation_state
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
