"""verify() detects tampering done behind the triggers' back, in a test-only database.

Each test gets its own scratch database: disabling the ledger triggers as superuser is
exactly what the hash chain exists to expose, and must not leak into other tests.
"""

from __future__ import annotations

import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from tests.integration.audit_support import T0, claimed, make_escalation, promote


def _three_row_chain(store: PostgresAuditStore):
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    (o,) = store.record_decisions([(claimed(esc), promote(esc))], "w")
    store.record_decisions([(claimed(o.state), promote(o.state, "compliance"))], "w")
    return esc.dispute_id


def _behind_the_triggers(engine: sa.Engine, sql: str, **params) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE escalation_audit DISABLE TRIGGER ALL"))
        conn.execute(sa.text(sql), params)
        for trigger in ("trg_escalation_audit_no_mutation", "trg_escalation_audit_no_truncate"):
            conn.execute(sa.text(f"ALTER TABLE escalation_audit ENABLE ALWAYS TRIGGER {trigger}"))


def test_intact_ledger_verifies_clean(scratch):
    store = PostgresAuditStore(scratch)
    ids = [_three_row_chain(store) for _ in range(3)]
    assert store.verify() == []
    assert all(store.verify(d) == [] for d in ids)
    calls: list[tuple[str, int, int | None]] = []
    assert store.verify(progress=lambda *call: calls.append(call)) == []
    assert calls == [("chains", 3, 3)]


def test_verify_detects_a_row_changed_with_triggers_disabled(scratch):
    store = PostgresAuditStore(scratch)
    clean = _three_row_chain(store)
    victim = _three_row_chain(store)
    _behind_the_triggers(
        scratch,
        "UPDATE escalation_audit SET actor = 'mallory' WHERE dispute_id = :d AND seq = 2",
        d=victim,
    )
    assert store.verify(victim) == [(victim, 2)]
    assert store.verify() == [(victim, 2)]
    assert store.verify(clean) == []


def test_verify_detects_a_rewritten_row_whose_own_hash_was_recomputed(scratch):
    store = PostgresAuditStore(scratch)
    victim = _three_row_chain(store)
    # Forge row 2 with a fresh, self-consistent hash: row 3's prev_hash no longer matches.
    _behind_the_triggers(
        scratch,
        "UPDATE escalation_audit SET row_hash = sha256(row_hash) WHERE dispute_id = :d AND seq = 2",
        d=victim,
    )
    assert store.verify(victim) == [(victim, 2)]


def test_verify_detects_a_deleted_tail_through_the_projection_head(scratch):
    store = PostgresAuditStore(scratch)
    victim = _three_row_chain(store)
    _behind_the_triggers(
        scratch, "DELETE FROM escalation_audit WHERE dispute_id = :d AND seq = 3", d=victim
    )
    assert store.verify(victim) == [(victim, 3)]


def test_duplicate_decisions_counts_a_double_escalation(scratch):
    store = PostgresAuditStore(scratch)
    victim = _three_row_chain(store)
    assert store.duplicate_decisions() == 0
    with scratch.begin() as conn:  # INSERT is allowed: forge a second decision row
        conn.execute(
            sa.text(
                "INSERT INTO escalation_audit SELECT dispute_id, 99, event, match_decision,"
                " from_tier, to_tier, ladder, ladder_version, calendar_version, materiality,"
                " due_at, next_due_at, regulatory_deadline, decided_at, recorded_at, actor,"
                " trace_id, source_hash, external_id, fence_token, details, prev_hash, row_hash,"
                " chain_created_at FROM escalation_audit WHERE dispute_id = :d AND seq = 2"
            ),
            {"d": victim},
        )
    assert store.duplicate_decisions() == 1
    assert store.verify(victim) == [(victim, 4)]
