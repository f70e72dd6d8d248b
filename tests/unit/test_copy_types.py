"""The binary COPY of ledger rows names each column's PostgreSQL type up front
(``audit_store.COPY_TYPES``, derived from the SQLAlchemy column types): a wrong or missing type
would fail every recorded batch, so the mapping is checked against the compiled DDL here."""

from __future__ import annotations

from sqlalchemy.dialects import postgresql as pg

from escalation.adapters.audit_store import COPY_COLUMNS, COPY_TYPES
from escalation.adapters.tables import escalation_audit

# The compiled SQL type of a column -> the type name psycopg's binary dumpers are chosen by.
_SQL_TO_COPY = {
    "UUID": "uuid", "BIGINT": "int8", "TEXT": "text", "INTEGER": "int4",
    "NUMERIC(18, 2)": "numeric", "TIMESTAMP WITH TIME ZONE": "timestamptz", "JSONB": "jsonb",
    "BYTEA": "bytea",
}


def test_copy_types_name_every_copied_column_with_its_table_type() -> None:
    assert len(COPY_TYPES) == len(COPY_COLUMNS)
    for name, copy_type in zip(COPY_COLUMNS, COPY_TYPES, strict=True):
        sql = escalation_audit.c[name].type.compile(dialect=pg.dialect())
        assert copy_type == _SQL_TO_COPY[sql], name
