"""Concurrent writers on one dispute: the projection row lock keeps one gapless chain."""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.db import make_engine
from escalation.domain.decide import Decision, DecisionKind
from escalation.ports import RecordStatus
from tests.integration.audit_support import T0, claimed, make_escalation

THREADS = 16
ROUNDS = 25


def test_concurrent_workers_on_one_dispute_keep_a_single_unbroken_chain(database_url):
    engine = make_engine(database_url, pool_size=THREADS)
    store = PostgresAuditStore(engine)
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    recorded: list[int] = []
    stale = 0
    lock = threading.Lock()
    start = threading.Barrier(THREADS)

    def worker(n: int) -> None:
        nonlocal stale
        start.wait()
        for _ in range(ROUNDS):
            current, _status = store.get(esc.dispute_id)
            # Every worker decides on what it read; only one per seq may win.
            to_tier = f"tier_{current.seq + 1}"
            now = T0 + timedelta(seconds=current.seq)
            decision = Decision(
                DecisionKind.PROMOTED,
                f"PROMOTED_TO_{to_tier.upper()}",
                current.tier,
                to_tier,
                now + timedelta(hours=1),
                now,
            )
            (outcome,) = store.record_decisions([(claimed(current, token=n), decision)], f"w{n}")
            with lock:
                if outcome.status is RecordStatus.RECORDED:
                    recorded.append(outcome.state.seq)
                else:
                    assert outcome.status is RecordStatus.STALE
                    stale += 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    rows = store.trail(esc.dispute_id)
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    assert sorted(recorded) == list(range(2, len(rows) + 1))  # each seq won exactly once
    assert len(recorded) + stale == THREADS * ROUNDS
    assert stale > 0  # the workers really did race
    for prev, row in itertools.pairwise(rows):
        assert row.prev_hash == prev.row_hash
        assert row.from_tier == prev.to_tier
    assert store.verify(esc.dispute_id) == []
    assert store.get(esc.dispute_id)[0].seq == len(rows)
    with engine.connect() as conn:
        dup = conn.execute(
            sa.text(
                "SELECT count(*) FROM (SELECT from_tier FROM escalation_audit WHERE dispute_id = :d"
                " AND event = 'PROMOTED' GROUP BY from_tier HAVING count(*) > 1) x"
            ),
            {"d": esc.dispute_id},
        ).scalar_one()
    assert dup == 0
    engine.dispose()


def test_concurrent_enqueues_of_overlapping_batches_record_each_dispute_once(database_url):
    engine = make_engine(database_url, pool_size=8)
    store = PostgresAuditStore(engine)
    escs = [make_escalation() for _ in range(200)]

    def enqueue(n: int) -> list[bool]:
        batch = escs[::-1] if n % 2 else escs  # opposite orders must not deadlock
        return [recorded for recorded, _ in store.record_enqueue_many(batch, f"svc{n}", T0)]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(enqueue, range(8)))
    assert sum(sum(r) for r in results) == len(escs)  # each dispute recorded exactly once
    assert all(len(store.trail(e.dispute_id)) == 1 for e in escs[:20])
    engine.dispose()
