"""Defence in depth: the application role may only INSERT and SELECT on the ledger;
triggers exist (ENABLE ALWAYS) on every partition; direct partition access is refused."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.partitions import partition_for
from escalation.adapters.tables import PARTITION_SCHEMA
from tests.integration.audit_support import T0, make_escalation


@pytest.fixture()
def dispute(engine: sa.Engine):
    esc = make_escalation()
    PostgresAuditStore(engine).record_enqueue(esc, "svc", T0)
    return esc.dispute_id


def _as_app(engine: sa.Engine, sql: str, **params):
    with engine.connect() as conn, conn.begin():
        conn.execute(sa.text("SET LOCAL ROLE escalation_app"))
        result = conn.execute(sa.text(sql), params)
        return result.all() if result.returns_rows else None


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE escalation_audit SET actor = 'mallory' WHERE dispute_id = :d",
        "DELETE FROM escalation_audit WHERE dispute_id = :d",
        "TRUNCATE escalation_audit",
        "ALTER TABLE escalation_audit DISABLE TRIGGER ALL",
        "UPDATE audit_checkpoint SET actor = 'x'",
    ],
    ids=["update", "delete", "truncate", "disable-triggers", "checkpoint-update"],
)
def test_app_role_is_refused_every_mutation_by_privileges(engine, dispute, sql):
    with pytest.raises(sa.exc.DBAPIError) as info:
        _as_app(engine, sql, d=dispute)
    # 42501: permission denied (privilege check, before any trigger); 42501 too for owner
    assert info.value.orig.sqlstate == "42501"
    assert "permission denied" in str(info.value) or "must be owner" in str(info.value)


def test_app_role_can_select_the_ledger(engine, dispute):
    rows = _as_app(engine, "SELECT seq FROM escalation_audit WHERE dispute_id = :d", d=dispute)
    assert rows == [(1,)]


def test_app_role_cannot_reach_a_partition_directly(engine, dispute):
    part = partition_for(T0.now(T0.tzinfo)).name
    with pytest.raises(sa.exc.DBAPIError) as info:
        _as_app(engine, f"DELETE FROM {PARTITION_SCHEMA}.{part}")
    assert info.value.orig.sqlstate == "42501"


def test_every_partition_has_both_triggers_enabled_always(engine):
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT c.relname, t.tgname, t.tgenabled FROM pg_inherits i"
                " JOIN pg_class c ON c.oid = i.inhrelid"
                " JOIN pg_trigger t ON t.tgrelid = c.oid AND NOT t.tgisinternal"
                " WHERE i.inhparent = 'escalation_audit'::regclass"
            )
        ).all()
        parts = conn.execute(
            sa.text("SELECT count(*) FROM pg_inherits WHERE inhparent = "
                    "'escalation_audit'::regclass")
        ).scalar_one()
    assert parts >= 4
    by_part: dict[str, dict[str, str]] = {}
    for rel, name, enabled in rows:
        by_part.setdefault(rel, {})[name] = str(enabled)
    assert len(by_part) == parts
    assert all(
        t == {"trg_escalation_audit_no_mutation": "A", "trg_escalation_audit_no_truncate": "A"}
        for t in by_part.values()
    )


@pytest.mark.parametrize("replica", [False, True], ids=["origin", "replica"])
@pytest.mark.parametrize("verb", ["TRUNCATE {p}", "DELETE FROM {p}", "UPDATE {p} SET actor='x'"])
def test_superuser_is_refused_on_a_partition_too(engine, dispute, verb, replica):
    with engine.connect() as conn:
        created = conn.execute(
            sa.text("SELECT created_at FROM escalation_state WHERE dispute_id = :d"),
            {"d": dispute},
        ).scalar_one()
    qualified = f"{PARTITION_SCHEMA}.{partition_for(created).name}"
    with (
        pytest.raises(sa.exc.DBAPIError, match="append-only"),
        engine.connect() as conn,
        conn.begin(),
    ):
        if replica:
            conn.execute(sa.text("SET LOCAL session_replication_role = replica"))
        conn.execute(sa.text(verb.format(p=qualified)))


def test_app_role_inserts_through_the_parent_without_partition_schema_access(engine, dispute):
    with engine.connect() as conn, conn.begin():
        row = conn.execute(
            sa.text("SELECT * FROM escalation_audit WHERE dispute_id = :d"), {"d": dispute}
        ).mappings().one()
        conn.execute(sa.text("SET LOCAL ROLE escalation_app"))
        cols = [c for c in row if c != "recorded_at"]
        conn.execute(
            sa.text(
                f"INSERT INTO escalation_audit ({', '.join(cols)}) VALUES "
                f"({', '.join(':' + c for c in cols)})"
            ),
            {**row, "seq": 2, "details": "{}"},
        )
        n = conn.execute(
            sa.text("SELECT count(*) FROM escalation_audit WHERE dispute_id = :d"), {"d": dispute}
        ).scalar_one()
        assert n == 2
        conn.rollback()
