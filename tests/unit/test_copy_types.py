"""The binary COPY of ledger rows names each column's PostgreSQL type up front
(``audit_sql.COPY_TYPES``): a wrong or missing type would fail every ladder migration batch,
so the mapping is checked against the table definition here."""

from __future__ import annotations

from sqlalchemy.dialects import postgresql as pg

from escalation.adapters.audit_sql import COPY_COLUMNS, COPY_TYPES
from escalation.adapters.tables import escalation_audit

# The compiled SQL type of a column -> the type name psycopg's binary dumpers are chosen by.
_SQL_TO_COPY = {
    "UUID": "uuid", "BIGINT": "int8", "TEXT": "text", "INTEGER": "int4",
    "NUMERIC(18, 2)": "numeric", "TIMESTAMP WITH TIME ZONE": "timestamptz", "JSONB": "jsonb",
    "BYTEA": "bytea",
}


def test_copy_types_name_every_copied_column_with_its_table_type() -> None:
    assert list(COPY_TYPES) == list(COPY_COLUMNS)
    for name in COPY_COLUMNS:
        sql = escalation_audit.c[name].type.compile(dialect=pg.dialect())
        assert COPY_TYPES[name] == _SQL_TO_COPY[sql], name
