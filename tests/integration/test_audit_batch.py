"""A full-size firing batch (500 items, the batch_size maximum) in one transaction."""

from __future__ import annotations

import time

import pytest

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.ports import RecordStatus
from tests.integration.audit_support import T0, claimed, make_escalation, promote


@pytest.mark.bench
def test_a_500_item_batch_records_every_item_with_intact_chains(engine, capsys):
    store = PostgresAuditStore(engine)
    states = [
        s for _, s in store.record_enqueue_many([make_escalation() for _ in range(500)], "s", T0)
    ]
    batch = [(claimed(s, token=i), promote(s)) for i, s in enumerate(states)]
    started = time.perf_counter()
    outcomes = store.record_decisions(batch, "bench")
    elapsed_ms = (time.perf_counter() - started) * 1000
    assert [o.status for o in outcomes] == [RecordStatus.RECORDED] * 500
    assert [o.state.dispute_id for o in outcomes] == [s.dispute_id for s in states]
    assert all(o.state.seq == 2 and o.state.tier == "senior" for o in outcomes)
    assert all(store.verify(s.dispute_id) == [] for s in states[:25])
    with capsys.disabled():  # informational only: no assertion on time
        print(f"\nrecord_decisions(500 items): {elapsed_ms:.1f} ms")
