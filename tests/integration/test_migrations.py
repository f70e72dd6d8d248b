"""Alembic migrations against real PostgreSQL: reversible, at head, matching the code's tables."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from escalation.adapters import db
from escalation.adapters.tables import metadata
from escalation.domain.errors import ConfigError, SchemaNotAtHead
from tests.conftest import scratch_database


def _tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def _triggers(engine: sa.Engine) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT tgname, tgenabled FROM pg_trigger"
                " WHERE tgrelid = 'escalation_audit'::regclass AND NOT tgisinternal"
            )
        )
        return {name: str(enabled) for name, enabled in rows}


def test_upgrade_downgrade_upgrade_round_trips(server_urls):
    with scratch_database(server_urls[1], "escalation_scratch", migrate=False) as url:
        engine = db.make_engine(url)
        try:
            db.upgrade_to_head(url)
            assert db.current_revision(engine) == db.head_revision()
            assert {"escalation_audit", "escalation_state"} <= _tables(engine)

            db.downgrade(url, "base")
            assert db.current_revision(engine) is None
            assert not {"escalation_audit", "escalation_state"} & _tables(engine)

            db.upgrade_to_head(url)
            assert db.current_revision(engine) == db.head_revision()
            db.check_at_head(engine)
        finally:
            engine.dispose()


def test_ledger_triggers_are_enabled_always(engine):
    # 'A' = ENABLE ALWAYS: fires even under session_replication_role = replica.
    assert _triggers(engine) == {
        "trg_escalation_audit_no_mutation": "A",
        "trg_escalation_audit_no_truncate": "A",
    }


def test_migrated_schema_matches_the_code_tables(engine):
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(ctx, metadata) == []


def test_check_at_head_refuses_an_unmigrated_database(server_urls):
    with scratch_database(server_urls[1], "escalation_scratch", migrate=False) as url:
        engine = db.make_engine(url)
        try:
            with pytest.raises(SchemaNotAtHead, match=r"revision none.*escalation db upgrade"):
                db.check_at_head(engine)
        finally:
            engine.dispose()


def test_check_at_head_names_both_revisions_when_behind(server_urls):
    with scratch_database(server_urls[1], "escalation_scratch", migrate=False) as url:
        db.upgrade_to_head(url)
        engine = db.make_engine(url)
        try:
            with engine.begin() as conn:
                conn.execute(sa.text("UPDATE alembic_version SET version_num = 'older'"))
            with pytest.raises(SchemaNotAtHead) as info:
                db.check_at_head(engine)
            assert "database is at revision older" in str(info.value)
            assert f"code expects {db.head_revision()}" in str(info.value)
        finally:
            engine.dispose()


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u:p@h:5432/d", "postgresql+psycopg://u:p@h:5432/d"),
        ("postgres://u@h/d", "postgresql+psycopg://u@h/d"),
        ("postgresql+psycopg://u@h/d", "postgresql+psycopg://u@h/d"),
        (
            "postgresql://postgres:@/db?host=/tmp/x",
            "postgresql+psycopg://postgres:@/db?host=%2Ftmp%2Fx",
        ),
    ],
)
def test_normalize_url_yields_a_psycopg3_url(given, expected):
    assert db.normalize_url(given) == expected
    assert sa.engine.make_url(db.normalize_url(given)).get_driver_name() == "psycopg"


def test_normalize_url_keeps_a_socket_directory_host():
    url = sa.engine.make_url(db.normalize_url("postgresql://postgres:@/db?host=/run/pg"))
    assert url.query["host"] == "/run/pg"
    assert url.database == "db"


@pytest.mark.parametrize("bad", ["", "mysql://u@h/d", "redis://127.0.0.1:6379/0"])
def test_normalize_url_refuses_non_postgresql_urls(bad):
    with pytest.raises(ConfigError):
        db.normalize_url(bad)


def test_db_upgrade_says_which_revisions_it_applied_or_that_it_was_at_head(
        server_urls, redis_url, namespace, redis_client):
    import os
    import subprocess
    import sys

    with scratch_database(server_urls[1], "escalation_scratch", migrate=False) as url:
        db.upgrade_to_head(url)
        db.downgrade(url, "0003")
        env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
        # a namespace of its own: binding stamps the database's identity in its Redis
        env.update(ESCALATION_DATABASE_URL=url, ESCALATION_REDIS_URL=redis_url,
                   ESCALATION_NAMESPACE=namespace, ESCALATION_LOG_FORMAT="json")
        cmd = [sys.executable, "-m", "escalation", "db", "upgrade"]
        first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120,
                               check=False)
        assert first.returncode == 0, first.stderr
        lines = first.stdout.strip().splitlines()
        applied = [line.split()[1] for line in lines[:-1]]
        assert applied[:2] == ["0004", "0005"] and applied[-1] == db.head_revision()
        assert all(line.startswith("applied ") for line in lines[:-1])
        assert lines[-1] == (f"database now at head ({db.head_revision()}): "
                             f"{len(applied)} revision(s) applied; bound to namespace {namespace}")
        again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120,
                               check=False)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == (
            f"database already at head ({db.head_revision()}): nothing to apply; "
            f"bound to namespace {namespace}")
