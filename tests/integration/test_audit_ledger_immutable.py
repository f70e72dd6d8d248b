"""The ledger is append-only: PostgreSQL refuses UPDATE, DELETE and TRUNCATE, even for a
superuser and even with ``session_replication_role = replica`` (triggers ENABLE ALWAYS)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from tests.integration.audit_support import T0, make_escalation

MUTATIONS = [
    "UPDATE escalation_audit SET actor = 'mallory' WHERE dispute_id = :d",
    "DELETE FROM escalation_audit WHERE dispute_id = :d",
    "TRUNCATE escalation_audit",
]


@pytest.fixture()
def dispute(engine: sa.Engine):
    esc = make_escalation()
    PostgresAuditStore(engine).record_enqueue(esc, "svc", T0)
    return esc.dispute_id


def _attempt(engine: sa.Engine, sql: str, dispute, replica: bool) -> None:
    with engine.connect() as conn, conn.begin():
        if replica:
            conn.execute(sa.text("SET LOCAL session_replication_role = replica"))
        conn.execute(sa.text(sql), {"d": dispute} if ":d" in sql else {})


@pytest.mark.parametrize("replica", [False, True], ids=["origin", "replica"])
@pytest.mark.parametrize("sql", MUTATIONS, ids=["update", "delete", "truncate"])
def test_ledger_refuses_mutation(engine, dispute, sql, replica):
    with pytest.raises(sa.exc.DBAPIError, match="append-only") as info:
        _attempt(engine, sql, dispute, replica)
    assert info.value.orig.sqlstate == "42501"  # insufficient_privilege
    with engine.connect() as conn:
        actors = (
            conn.execute(
                sa.text("SELECT actor FROM escalation_audit WHERE dispute_id = :d"), {"d": dispute}
            )
            .scalars()
            .all()
        )
    assert actors == ["svc"]


def test_the_store_has_no_update_or_delete_verb_for_the_ledger():
    public = {name for name in dir(PostgresAuditStore) if not name.startswith("_")}
    assert not {n for n in public if n.startswith(("update", "delete", "remove", "purge"))}
