"""The audit search's decision filter answers from two ordered index ranges (the rows whose
event is the name, the rows whose ``match_decision`` is the name and differs from their
event: migration 0021) merged by (decided_at, dispute_id, seq): the same rows, in the same
order, as the filter's meaning (event or decision equals the name) read over the whole
ledger, in keyset pages, streamed, and counted."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from escalation.adapters.audit_search import PostgresLedgerSearch
from escalation.ports import AuditFilter

T0 = datetime(2026, 3, 30, 12, 0, tzinfo=UTC)  # the rows span three monthly partitions

# (event, match_decision) pairs as the product records them, plus one row whose decision
# names another event (no code path writes one today; the filter must still find it)
PAIRS = [("PROMOTED", "PROMOTED_TO_SENIOR"), ("PROMOTED", "PROMOTED_TO_COMPLIANCE"),
         ("RESOLVED", "RESOLVED_ERROR_CORRECTED"), ("CANCELLED", "CANCELLED"),
         ("ACTION_RECORDED", "ACTION_PROVISIONAL_CREDIT"), ("WARNING", "SLA_WARNING")]
ODD = ("WARNING", "CANCELLED")


def _insert_rows(engine: sa.Engine) -> list[dict[str, Any]]:
    """About 120 ledger rows on 40 disputes over three months, with ties on decided_at
    across disputes (the order's second key decides); the hashes are placeholders (the
    search reads no hash)."""
    rows: list[dict[str, Any]] = []
    for n in range(40):
        did = uuid.UUID(int=(n * 7919) % 40 + 1)  # ids not in insertion order
        created = T0 + timedelta(days=n % 3 * 31)
        for seq in range(1, 4):
            event, decision = PAIRS[(n + seq) % len(PAIRS)] if n != 17 or seq != 2 else ODD
            at = created + timedelta(hours=(n * seq) % 5)  # many equal instants
            rows.append({"dispute_id": did, "seq": seq, "event": event,
                         "match_decision": decision, "decided_at": at,
                         "chain_created_at": created})
    with engine.begin() as conn:
        for month in {r["chain_created_at"].date().replace(day=1) for r in rows}:
            conn.execute(sa.text("SELECT escalation_audit_ensure_partition(:m)"), {"m": month})
        conn.execute(sa.text(
            "INSERT INTO escalation_audit (dispute_id, seq, event, match_decision, to_tier, "
            "ladder, ladder_version, materiality, decided_at, actor, trace_id, source_hash, "
            "prev_hash, row_hash, chain_created_at) VALUES (:dispute_id, :seq, :event, "
            ":match_decision, 'standard', 'dispute_review', 1, 10, :decided_at, 'test', '', "
            "'', decode(repeat('00', 32), 'hex'), decode(repeat('11', 32), 'hex'), "
            ":chain_created_at)"), rows)
    return rows


def _key(r: Any) -> tuple[datetime, uuid.UUID, int]:
    return (r["decided_at"], r["dispute_id"], r["seq"])


@pytest.mark.parametrize("decision", [
    "CANCELLED",  # an event name: its rows, and the odd row whose decision names it
    "RESOLVED", "PROMOTED", "PROMOTED_TO_SENIOR", "RESOLVED_ERROR_CORRECTED",
    "ACTION_PROVISIONAL_CREDIT", "SLA_WARNING_DROPPED",  # the last: no row
])
def test_a_decision_search_returns_the_filters_rows_in_order(scratch: sa.Engine,
                                                              decision: str) -> None:
    rows = _insert_rows(scratch)
    want = sorted(_key(r) for r in rows
                   if decision in (r["event"], r["match_decision"]))
    if decision == "CANCELLED":
        assert any(r["match_decision"] == "CANCELLED" and r["event"] == "WARNING"
                   for r in rows)  # the odd row is among those wanted
    ledger = PostgresLedgerSearch(scratch, batch=4)
    flt = AuditFilter(decision=decision)
    pages: list[tuple[datetime, uuid.UUID, int]] = []
    after = None
    while True:
        page = ledger.search(flt, 3, after)
        pages += [(r.decided_at, r.dispute_id, r.seq) for r in page]
        if len(page) < 3:
            break
        after = pages[-1]
    assert pages == want
    streamed = list(ledger.stream(flt, ["dispute_id", "event"]))
    assert [(r["dispute_id"], r["event"]) for r in streamed] == [
        (k[1], next(r["event"] for r in rows if _key(r) == k)) for k in want]
    assert all(set(r) == {"dispute_id", "event"} for r in streamed)  # the asked columns
    assert ledger.count(flt) == len(want)
    # with another filter beside it, each branch keeps it
    since = T0 + timedelta(days=31)
    assert [(r.decided_at, r.dispute_id, r.seq)
            for r in ledger.search(AuditFilter(decision=decision, since=since), 500)] == [
        k for k in want if k[0] >= since]


def test_the_decision_index_is_used_for_a_decision_that_is_not_an_event(
        scratch: sa.Engine) -> None:
    _insert_rows(scratch)
    with scratch.begin() as conn:
        conn.execute(sa.text("ANALYZE escalation_audit"))
        conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(conn.execute(sa.text(
            "EXPLAIN SELECT * FROM escalation_audit WHERE match_decision = 'RESOLVED_X' "
            "AND match_decision <> event ORDER BY decided_at LIMIT 5")).scalars())
    assert "ix_escalation_audit_decision" in plan or "match_decision_decided_at" in plan, plan
