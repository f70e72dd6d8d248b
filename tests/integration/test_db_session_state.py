"""A connection the engine makes carries no session state, on a real PostgreSQL (the URL
forms it accepts are checked without a server in tests/unit/test_db_urls.py; the same paths
through a real pgbouncer: tests/postgres/test_pgbouncer.py)."""

from __future__ import annotations

import sqlalchemy as sa

from escalation.adapters.db import make_engine


def test_no_session_state_goes_on_the_connection(database_url: str) -> None:
    # transaction pooling: no startup `options` (pgbouncer refuses them) and no server-side
    # prepared statements (the next transaction runs on another server connection)
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            driver = conn.connection.driver_connection
            assert driver is not None and driver.prepare_threshold is None
            assert "options" not in driver.info.get_parameters()
            for _ in range(8):  # psycopg would prepare from the 5th use
                conn.execute(sa.text("SELECT 1 WHERE 1 = :x"), {"x": 1})
            prepared = conn.execute(sa.text("SELECT count(*) FROM pg_prepared_statements"))
            assert prepared.scalar_one() == 0
    finally:
        engine.dispose()
