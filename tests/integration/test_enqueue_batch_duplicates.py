"""A dispute repeated within one ``enqueue_many`` call, on real Redis and PostgreSQL.

The first occurrence is recorded and scheduled; every later occurrence is answered like a
replay (``created=False``) with the state actually recorded, never with its own unrecorded
values; the ledger holds one ENQUEUED row per dispute, whose provenance is the recorded
occurrence's.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from escalation.adapters.redis_scheduler import payload_to_escalation
from escalation.domain.escalation import Status
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import (
    EnqueueMany,
    EnqueueRequest,
    EnqueueResult,
    build_many,
    enqueue_many,
    record_batches,
)

DUE = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3000)  # within DUE_IN_MAX


def req(did: uuid.UUID, **over: Any) -> EnqueueRequest:
    fields: dict[str, Any] = {"dispute_id": did, "materiality": "125.50",
                              "source_hash": did.hex, "tier": "standard", "due_at": DUE}
    fields.update(over)
    return EnqueueRequest(**fields)


def run(app: Any, requests: list[EnqueueRequest]) -> list[EnqueueResult]:
    return enqueue_many(
        EnqueueMany(requests=requests, actor="svc", default_ladder="dispute_review"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )


def enqueued_rows(app: Any, did: uuid.UUID) -> list[Any]:
    return [r for r in app.store.trail(did) if r.event == "ENQUEUED"]


def assert_answers_match_the_record(app: Any, results: list[EnqueueResult]) -> None:
    """Every answer is the state PostgreSQL holds and Redis scheduled, with its status."""
    for res in results:
        did = res.escalation.dispute_id
        got = app.store.get(did)
        assert got is not None
        assert res.escalation == got[0]
        assert res.status is got[1]
        [row] = enqueued_rows(app, did)
        assert (row.trace_id, row.due_at) == (got[0].trace_id, got[0].due_at)
        assert row.details["institution"]["timezone"] == got[0].institution_tz
        fields = app.scheduler.payload(did)
        assert fields is not None
        assert payload_to_escalation(did, fields) == got[0].with_changes(status=Status.PENDING)
        assert app.store.verify(did) == []


def test_identical_repeats_are_answered_like_a_replay(app):
    did = uuid.uuid4()
    # identical bodies without a trace id: each request would otherwise get its own
    results = run(app, [req(did), req(did), req(did)])
    assert [r.created for r in results] == [True, False, False]
    assert {r.status for r in results} == {Status.PENDING}
    assert len({r.escalation.trace_id for r in results}) == 1
    assert_answers_match_the_record(app, results)
    replay = run(app, [req(did)])
    assert replay[0].created is False and replay[0].escalation == results[0].escalation


def test_a_repeat_with_different_content_gets_the_first_occurrences_record(app):
    did = uuid.uuid4()
    first = req(did, trace_id="first", timezone="America/New_York")
    later = req(did, trace_id="later", due_at=DUE + timedelta(days=2),
                timezone="Europe/London", materiality="9.99")
    results = run(app, [first, later])
    assert [r.created for r in results] == [True, False]
    assert [r.source_hash_differs for r in results] == [False, False]  # same hash, did.hex
    assert [r.escalation.trace_id for r in results] == ["first", "first"]
    assert [r.escalation.due_at for r in results] == [DUE, DUE]
    assert results[1].escalation.institution_tz == "America/New_York"
    assert str(results[1].escalation.materiality.amount) == "125.50"
    assert_answers_match_the_record(app, results)


def test_repeats_mixed_with_other_and_existing_disputes(app):
    a, b, c, old = (uuid.uuid4() for _ in range(4))
    [before] = run(app, [req(old, trace_id="old")])
    batch = [req(a, trace_id="a1"), req(b, trace_id="b1"), req(old, trace_id="old2"),
             req(a, trace_id="a2", due_at=DUE + timedelta(hours=1)), req(c),
             req(b, trace_id="b2"), req(old, trace_id="old3"), req(a, trace_id="a3")]
    results = run(app, batch)
    assert [r.created for r in results] == [True, True, False, False, True, False, False,
                                            False]
    assert [r.escalation.dispute_id for r in results] == [x.dispute_id for x in batch]
    assert [r.escalation.trace_id for r in results] == [
        "a1", "b1", "old", "a1", results[4].escalation.trace_id, "b1", "old", "a1"]
    assert results[2].escalation == before.escalation
    assert_answers_match_the_record(app, results)
    for did in (a, b, c, old):
        assert len(enqueued_rows(app, did)) == 1


def test_a_repeat_in_a_later_chunk_is_answered_from_the_record(app):
    """Chunks are separate transactions: the repeat in the second one is a plain replay."""
    a, b, c = (uuid.uuid4() for _ in range(3))
    now = app.scheduler.time()
    built = build_many([req(a, trace_id="a1"), req(b), req(c), req(a, trace_id="a2")],
                       ladders=app.ladders, calendars=app.calendars,
                       default_ladder="dispute_review", now=now)
    ports = CorePorts(app.scheduler, app.store, app.ladders, app.calendars)
    results = [r for part in record_batches([built[:2], built[2:]], ports, "svc", now)
               for r in part]
    assert [r.created for r in results] == [True, True, True, False]
    assert results[3].escalation.trace_id == "a1"
    assert_answers_match_the_record(app, results)


def test_the_store_answers_a_repeat_with_what_its_first_occurrence_recorded(app):
    """``record_enqueue_many`` called directly (below the service layer) keeps the rule."""
    did = uuid.uuid4()
    now = app.scheduler.time()
    built = build_many([req(did, trace_id="x"), req(did, trace_id="y")],
                       ladders=app.ladders, calendars=app.calendars,
                       default_ladder="dispute_review", now=now)
    out = app.store.record_enqueue_many([b.escalation for b in built], "svc", now)
    assert [created for created, _ in out] == [True, False]
    assert out[0][1] == out[1][1] == app.store.get(did)[0]


def test_a_replayed_batch_reads_the_recorded_states_in_one_query(app: Any) -> None:
    import sqlalchemy as sa

    ids = [uuid.uuid4() for _ in range(60)]
    first = run(app, [req(d) for d in ids[:40]])
    assert all(r.created for r in first)
    cancelled = ids[3]
    app.store.record_cancel(cancelled, "svc", datetime.now(UTC), "resolved")

    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    sa.event.listen(app.engine, "before_cursor_execute", count)
    try:
        again = run(app, [req(d) for d in ids])  # 40 replays (one cancelled) and 20 new
    finally:
        sa.event.remove(app.engine, "before_cursor_execute", count)
    assert [r.created for r in again] == [False] * 40 + [True] * 20
    assert again[3].status is Status.CANCELLED
    assert all(r.status is Status.PENDING for i, r in enumerate(again) if i != 3)
    assert_answers_match_the_record(app, [r for i, r in enumerate(again) if i != 3])
    # the states of the 40 replays come from one SELECT, not one per replay
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")
             and "escalation_state" in s]
    assert len(reads) <= 3, reads


def test_source_hash_differs_flags_a_replay_that_carried_another_source_hash(app):
    did, other = uuid.uuid4(), uuid.uuid4()
    results = run(app, [req(did), req(did, source_hash="AB" * 8), req(did),
                        req(other, source_hash="CD" * 8)])
    assert [r.created for r in results] == [True, False, False, True]
    # the second occurrence was not applied; the hash is compared lower-cased (as recorded)
    assert [r.source_hash_differs for r in results] == [False, True, False, False]
    replays = run(app, [req(did, source_hash="ab" * 8), req(did),
                        req(other, source_hash="cd" * 8)])
    assert [r.source_hash_differs for r in replays] == [True, False, False]
