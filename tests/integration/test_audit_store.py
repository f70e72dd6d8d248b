"""PostgresAuditStore against real PostgreSQL: enqueue, decisions, cancel, events, reads."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.domain.audit_hash import GENESIS
from escalation.domain.decide import Decision, DecisionKind
from escalation.domain.errors import ConflictError, InvalidInput, NotFound
from escalation.domain.escalation import Status
from escalation.ports import LedgerEvent, RecordStatus
from tests.integration.audit_support import T0, claimed, make_escalation, promote, terminal


@pytest.fixture()
def store(engine: sa.Engine) -> PostgresAuditStore:
    return PostgresAuditStore(engine)


def _ledger_count(engine: sa.Engine, dispute_id: uuid.UUID) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text("SELECT count(*) FROM escalation_audit WHERE dispute_id = :d"),
                {"d": dispute_id},
            ).scalar_one()
        )


# ------------------------------------------------------------------ enqueue
def test_enqueue_records_projection_and_enqueued_row_at_seq_1(store):
    esc = make_escalation()
    recorded, state = store.record_enqueue(esc, "svc", T0)
    assert recorded is True
    assert state.seq == 1 and state.status is Status.PENDING
    got, status = store.get(esc.dispute_id)
    assert status is Status.PENDING
    assert got == esc.with_changes(seq=1)
    (row,) = store.trail(esc.dispute_id)
    assert (row.seq, row.event, row.match_decision, row.to_tier) == (
        1,
        "ENQUEUED",
        "ENQUEUED",
        "standard",
    )
    assert row.prev_hash == GENESIS.hex()
    assert row.materiality == "1250.00"
    assert row.recorded_at is not None


def test_enqueue_round_trips_text_that_copy_must_escape_and_the_chain_verifies(store):
    # the bulk write sends rows as COPY text: backslashes, tabs and newlines in values (and
    # JSON escapes in details) must reach the database unchanged, and the stored row must
    # hash to the row_hash computed before sending it
    esc = make_escalation().with_changes(
        external_id="ext\\N \\x00 caf\u00e9", trace_id="tr\\ace", institution_tz="UTC",
        regulatory_deadline=T0 + timedelta(days=3),
        deadlines=(("reg\\e", T0 + timedelta(days=3)),))
    odd = {"attributes": {"memo": "tab\there\nline \\ \"q\" \u2028", "n": 7, "ok": True}}
    decided = datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    [(recorded, _)] = store.record_enqueue_many([esc], "svc\\1", decided, {esc.dispute_id: "v\t2"},
                                                {esc.dispute_id: odd})
    assert recorded
    got, _ = store.get(esc.dispute_id)
    assert got == esc.with_changes(seq=1)
    (row,) = store.trail(esc.dispute_id)
    assert row.actor == "svc\\1" and row.calendar_version == "v\t2"
    assert row.external_id == esc.external_id and row.decided_at == decided
    assert row.details["attributes"] == odd["attributes"]
    assert row.details["deadlines"] == {"reg\\e": (T0 + timedelta(days=3)).isoformat()}
    assert store.verify(esc.dispute_id) == []


def test_enqueue_is_idempotent_per_dispute(store, engine):
    esc = make_escalation()
    store.record_enqueue(esc, "svc", T0)
    again, state = store.record_enqueue(esc.with_changes(tier="senior"), "svc", T0)
    assert again is False
    assert state.tier == "standard" and state.seq == 1
    assert _ledger_count(engine, esc.dispute_id) == 1


def test_enqueue_many_records_new_ones_and_returns_existing_state_for_the_rest(store, engine):
    old = make_escalation()
    store.record_enqueue(old, "svc", T0)
    new = [make_escalation() for _ in range(50)]
    results = store.record_enqueue_many([*new, old, new[0]], "svc", T0)
    assert [r[0] for r in results] == [True] * 50 + [False, False]
    assert all(state.seq == 1 for _, state in results)
    assert all(_ledger_count(engine, e.dispute_id) == 1 for e in [old, *new[:3]])
    assert store.verify(new[7].dispute_id) == []


def test_enqueue_refuses_a_naive_decision_time(store):
    with pytest.raises(InvalidInput, match="timezone-aware"):
        store.record_enqueue(make_escalation(), "svc", T0.replace(tzinfo=None))


# ------------------------------------------------------------------ decisions
def test_record_decisions_appends_a_chained_row_and_moves_the_projection(store):
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    decision = promote(esc)
    (outcome,) = store.record_decisions([(claimed(esc, token=42), decision)], "worker-1")
    assert outcome.status is RecordStatus.RECORDED
    state = outcome.state
    assert state is not None
    assert (state.seq, state.tier, state.status) == (2, "senior", Status.PENDING)
    assert state.due_at == decision.next_due_at
    assert state.entered_tier_at == decision.decided_at
    assert store.get(esc.dispute_id) == (state, Status.PENDING)
    first, second = store.trail(esc.dispute_id)
    assert second.prev_hash == first.row_hash
    assert (second.event, second.match_decision) == ("PROMOTED", "PROMOTED_TO_SENIOR")
    assert (second.from_tier, second.to_tier) == ("standard", "senior")
    assert second.due_at == esc.due_at  # the breached due time
    assert second.next_due_at == decision.next_due_at
    assert (second.fence_token, second.actor) == (42, "worker-1")
    assert store.verify(esc.dispute_id) == []


def test_terminal_decision_closes_the_escalation(store):
    esc = store.record_enqueue(make_escalation(tier="compliance"), "svc", T0)[1]
    (outcome,) = store.record_decisions([(claimed(esc), terminal(esc))], "w")
    assert outcome.status is RecordStatus.RECORDED
    assert outcome.state is not None and outcome.state.status is Status.TERMINAL
    assert store.trail(esc.dispute_id)[-1].event == "TERMINAL"
    # A later claim of the same dispute finds it closed and records nothing.
    (late,) = store.record_decisions([(claimed(outcome.state), terminal(esc))], "w")
    assert late.status is RecordStatus.CLOSED
    assert len(store.trail(esc.dispute_id)) == 2


def test_stale_claim_is_not_recorded_and_returns_the_current_state(store, engine):
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    store.record_decisions([(claimed(esc), promote(esc))], "w1")
    (outcome,) = store.record_decisions([(claimed(esc), promote(esc))], "w2")  # seq 1 again
    assert outcome.status is RecordStatus.STALE
    assert outcome.state is not None and outcome.state.seq == 2
    assert _ledger_count(engine, esc.dispute_id) == 2


def test_repeating_a_batch_writes_nothing(store, engine):
    escs = [
        r[1] for r in store.record_enqueue_many([make_escalation() for _ in range(20)], "s", T0)
    ]
    batch = [(claimed(e), promote(e)) for e in escs]
    first = store.record_decisions(batch, "w")
    assert {o.status for o in first} == {RecordStatus.RECORDED}
    second = store.record_decisions(batch, "w")
    assert {o.status for o in second} == {RecordStatus.STALE}
    assert [o.state for o in second] == [o.state for o in first]
    assert all(_ledger_count(engine, e.dispute_id) == 2 for e in escs)


def test_same_dispute_twice_in_one_batch_is_recorded_once(store):
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    a, b = store.record_decisions([(claimed(esc), promote(esc)), (claimed(esc), promote(esc))], "w")
    assert (a.status, b.status) == (RecordStatus.RECORDED, RecordStatus.STALE)
    assert b.state == a.state


def test_unknown_dispute_is_reported_not_recorded(store):
    ghost = make_escalation().with_changes(seq=1)
    (outcome,) = store.record_decisions([(claimed(ghost), promote(ghost))], "w")
    assert outcome.status is RecordStatus.UNKNOWN and outcome.state is None
    assert store.trail(ghost.dispute_id) == []


def test_mixed_batch_keeps_input_order(store):
    a = store.record_enqueue(make_escalation(), "s", T0)[1]
    b = store.record_enqueue(make_escalation(), "s", T0)[1]
    store.record_cancel(b.dispute_id, "svc", T0, "resolved")
    ghost = make_escalation().with_changes(seq=1)
    out = store.record_decisions(
        [(claimed(ghost), promote(ghost)), (claimed(b), promote(b)), (claimed(a), promote(a))], "w"
    )
    assert [o.status for o in out] == [
        RecordStatus.UNKNOWN,
        RecordStatus.CLOSED,
        RecordStatus.RECORDED,
    ]


def test_not_due_decision_is_refused_before_anything_is_written(store, engine):
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    not_due = Decision(DecisionKind.NOT_DUE, "NOT_DUE", esc.tier, None, None, T0)
    with pytest.raises(InvalidInput, match="NOT_DUE"):
        store.record_decisions([(claimed(esc), promote(esc)), (claimed(esc), not_due)], "w")
    assert _ledger_count(engine, esc.dispute_id) == 1


def test_empty_batch_records_nothing(store):
    assert store.record_decisions([], "w") == []


# ------------------------------------------------------------------ cancel / stuck / events
def test_cancel_records_reason_and_is_idempotent(store, engine):
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    cancelled = store.record_cancel(esc.dispute_id, "svc", T0 + timedelta(hours=1), "resolved")
    assert cancelled.status is Status.CANCELLED and cancelled.seq == 2
    row = store.trail(esc.dispute_id)[-1]
    assert (row.event, row.details) == ("CANCELLED", {"reason": "resolved"})
    again = store.record_cancel(esc.dispute_id, "svc", T0 + timedelta(hours=2), "resolved")
    assert again == cancelled
    assert _ledger_count(engine, esc.dispute_id) == 2


def test_cancel_of_unknown_dispute_raises_not_found(store):
    with pytest.raises(NotFound, match="no escalation"):
        store.record_cancel(uuid.uuid4(), "svc", T0, "resolved")


def test_cancel_after_terminal_escalation_is_a_conflict(store):
    esc = store.record_enqueue(make_escalation(tier="compliance"), "svc", T0)[1]
    store.record_decisions([(claimed(esc), terminal(esc))], "w")
    with pytest.raises(ConflictError, match="terminal"):
        store.record_cancel(esc.dispute_id, "svc", T0, "resolved")


def test_stuck_member_is_chained_without_changing_the_state(store):
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    after = store.record_stuck(esc.dispute_id, "w", T0, {"shard": 0})
    assert after == esc.with_changes(seq=2)
    assert store.trail(esc.dispute_id)[-1].event == "STUCK_MEMBER"
    assert store.record_stuck(uuid.uuid4(), "w", T0) is None


def test_append_event_applies_changes_in_the_same_transaction(store):
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    paused = store.append_event(LedgerEvent(
        esc.dispute_id,
        "PAUSED",
        "PAUSED",
        "admin",
        T0,
        {"status": Status.PAUSED, "remaining_ms": 5000},
        {"why": "hold"}))
    assert paused.status is Status.PAUSED and paused.seq == 2
    resumed = store.append_event(LedgerEvent(
        esc.dispute_id,
        "RESUMED",
        "RESUMED",
        "admin",
        T0 + timedelta(hours=1),
        {"status": "pending", "due_at": T0 + timedelta(hours=1, seconds=5), "remaining_ms": None},
        {},
        expected_seq=2))
    assert resumed.status is Status.PENDING and resumed.due_at == T0 + timedelta(hours=1, seconds=5)
    rows = store.trail(esc.dispute_id)
    assert [r.event for r in rows] == ["ENQUEUED", "PAUSED", "RESUMED"]
    assert rows[1].next_due_at is None and rows[2].next_due_at == resumed.due_at
    assert store.verify(esc.dispute_id) == []


def test_a_claim_made_before_a_pause_is_stale(store):
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    store.append_event(LedgerEvent(esc.dispute_id, "PAUSED", "PAUSED", "admin", T0,
                                   {"status": "paused"}, {}))
    (outcome,) = store.record_decisions([(claimed(esc), promote(esc))], "w")
    assert outcome.status is RecordStatus.STALE
    assert outcome.state is not None and outcome.state.status is Status.PAUSED


def test_append_event_refuses_bad_input_and_seq_mismatch(store):
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    with pytest.raises(InvalidInput, match="unknown ledger event"):
        store.append_event(LedgerEvent(esc.dispute_id, "DELETED", "X", "a", T0, {}, {}))
    with pytest.raises(InvalidInput, match="last_seq"):
        store.append_event(LedgerEvent(esc.dispute_id, "WARNING", "X", "a", T0,
                                       {"last_seq": 9}, {}))
    with pytest.raises(InvalidInput, match="float"):
        store.append_event(LedgerEvent(esc.dispute_id, "WARNING", "X", "a", T0, {}, {"ratio": 0.5}))
    with pytest.raises(ConflictError, match="expected 7"):
        store.append_event(LedgerEvent(esc.dispute_id, "WARNING", "X", "a", T0, {}, {},
                                       expected_seq=7))
    with pytest.raises(NotFound):
        store.append_event(LedgerEvent(uuid.uuid4(), "WARNING", "X", "a", T0, {}, {}))
    assert len(store.trail(esc.dispute_id)) == 1


# ------------------------------------------------------------------ reads
def test_pending_page_is_a_keyset_scan_over_pending_escalations(store):
    escs = [r[1] for r in store.record_enqueue_many([make_escalation() for _ in range(5)], "s", T0)]
    store.record_cancel(escs[0].dispute_id, "s", T0, "resolved")
    mine = {e.dispute_id for e in escs[1:]}
    seen, after = [], None
    while page := store.pending_page(after, 3):
        seen.extend(e.dispute_id for e in page)
        after = page[-1].dispute_id
    assert seen == sorted(seen)
    assert mine <= set(seen) and escs[0].dispute_id not in seen
    with pytest.raises(InvalidInput):
        store.pending_page(None, 0)


def test_counts_report_statuses_and_pending_tiers(store):
    before = store.counts()
    esc = store.record_enqueue(make_escalation(), "s", T0)[1]
    store.record_decisions([(claimed(esc), promote(esc))], "w")
    after = store.counts()
    assert after["by_status"]["pending"] == before["by_status"]["pending"] + 1
    assert after["pending_by_tier"]["senior"] == before["pending_by_tier"].get("senior", 0) + 1
    assert set(after["by_status"]) == {"pending", "paused", "terminal", "cancelled", "resolved"}


def test_duplicate_decisions_is_zero_after_normal_recording(store):
    esc = store.record_enqueue(make_escalation(), "s", T0)[1]
    out = store.record_decisions([(claimed(esc), promote(esc))], "w")
    store.record_decisions([(claimed(out[0].state), promote(out[0].state, "compliance"))], "w")
    store.record_decisions([(claimed(esc), promote(esc))], "w")  # stale repeat
    assert store.duplicate_decisions() == 0
