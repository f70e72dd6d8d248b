"""Alembic environment for the escalation schema (SQLAlchemy 2, PostgreSQL only).

Where the database URL comes from, first match wins (read when a command runs, never at
import of the application):
1. ``config.attributes["connection"]``: a live connection shared by the caller;
2. ``config.attributes["database_url"]``: set by ``escalation.adapters.db`` (the CLI);
3. ``alembic -x url=postgresql://...``;
4. the application settings (``ESCALATION_DATABASE_URL``);
5. ``sqlalchemy.url`` in the ini file.

Online runs take a transaction-level advisory lock first, so two deploying processes cannot
migrate the same database at once.
"""

from __future__ import annotations

from logging.config import fileConfig

import sqlalchemy as sa
from alembic import context

from escalation.adapters.db import normalize_url
from escalation.adapters.tables import metadata
from escalation.settings import get_settings

MIGRATION_LOCK_KEY = 7_305_114_211_001  # arbitrary constant: "escalation schema migration"

config = context.config
if config.config_file_name is not None:  # the `alembic` CLI; from code we keep app logging
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = metadata


def _database_url() -> str:
    """The URL to migrate (sources 2-5 of the module docstring).

    Raises:
        RuntimeError: no source gives a URL.
    """
    url = config.attributes.get("database_url")
    if not url:
        url = context.get_x_argument(as_dictionary=True).get("url")
    if not url:
        url = get_settings().database_url
    if not url:
        url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError(
            "no database URL: set ESCALATION_DATABASE_URL, pass `-x url=...`, "
            "or run `escalation db upgrade`"
        )
    return normalize_url(str(url))


def _configure_and_run(connection: sa.Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
        context.run_migrations()


def run_migrations_offline() -> None:
    """``alembic upgrade --sql``: emit SQL for review instead of executing it."""
    context.configure(
        url=_database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run against a live database (a shared connection, or a fresh NullPool engine)."""
    shared = config.attributes.get("connection")
    if shared is not None:
        _configure_and_run(shared)
        return
    # no server-side prepared statements: behind a transaction-pooling pooler they would
    # stay on a server connection another client gets next (adapters/db.py make_engine)
    engine = sa.create_engine(_database_url(), poolclass=sa.pool.NullPool,
                              connect_args={"prepare_threshold": None})
    try:
        with engine.connect() as connection:
            _configure_and_run(connection)
            connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
