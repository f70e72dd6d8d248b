"""The API's group commit of single creates (``entrypoints.api.batching.CreateBatcher``) on
real Redis and PostgreSQL: requests submitted together are written as one batch, and each
still gets its own answer (created / already there / its own error), with its own token's
name as the ledger actor."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from escalation.domain.errors import ConflictError, InvalidInput, UnknownTier
from escalation.domain.escalation import Status
from escalation.entrypoints.api.batching import CreateBatcher, Created
from escalation.service_layer.enqueue import EnqueueRequest

DUE = datetime.now(UTC) + timedelta(days=3000)  # within DUE_IN_MAX


def req(did: uuid.UUID | None = None, **over: Any) -> EnqueueRequest:
    did = did or uuid.uuid4()
    fields: dict[str, Any] = {"dispute_id": did, "materiality": "125.50",
                              "source_hash": did.hex, "tier": "standard", "due_at": DUE}
    fields.update(over)
    return EnqueueRequest(**fields)


def submit_all(app: Any, items: list[tuple[EnqueueRequest, str]],
               writers: int = 1) -> tuple[list[Created | BaseException], CreateBatcher]:
    """Submit every item on one event loop before any write starts; outcomes in order."""
    batcher = CreateBatcher(app, writers=writers)

    async def go() -> list[Created | BaseException]:
        return await asyncio.gather(*(batcher.submit(r, actor) for r, actor in items),
                                    return_exceptions=True)

    try:
        return asyncio.run(go()), batcher
    finally:
        batcher.close()


def actors(app: Any, did: uuid.UUID) -> list[tuple[str, str]]:
    return [(r.event, r.actor) for r in app.store.trail(did)]


def test_concurrent_creates_of_distinct_disputes_are_one_batch(app):
    ids = [uuid.uuid4() for _ in range(25)]
    outcomes, batcher = submit_all(app, [(req(d), "svc-a") for d in ids])
    assert batcher.batches == 1 and batcher.largest == 25
    for did, out in zip(ids, outcomes, strict=True):
        assert isinstance(out, Created), out
        assert out.result.created and out.result.escalation.dispute_id == did
        assert actors(app, did) == [("ENQUEUED", "svc-a")]
        assert app.scheduler.payload(did) is not None  # scheduled in Redis too


def test_same_dispute_submitted_together_is_created_once(app):
    did, other = uuid.uuid4(), uuid.uuid4()
    items = [(req(did, trace_id=f"t{i}"), "svc-a") for i in range(4)] + [(req(other), "svc-a")]
    outcomes, batcher = submit_all(app, items)
    # one request per dispute per batch: the repeats wait for later batches
    assert batcher.batches == 4
    done = [o for o in outcomes if isinstance(o, Created)]
    assert [o.result.created for o in done] == [True, False, False, False, True]
    assert {o.result.status for o in done} == {Status.PENDING}
    # the repeats are answered with the recorded state, not their own request's values
    assert {o.result.escalation.trace_id for o in done[:4]} == {"t0"}
    assert actors(app, did) == [("ENQUEUED", "svc-a")]


def test_replays_answer_already_there(app):
    ids = [uuid.uuid4() for _ in range(4)]
    first, _ = submit_all(app, [(req(d), "svc-a") for d in ids])
    again, _ = submit_all(app, [(req(d), "svc-b") for d in ids] + [(req(), "svc-b")])
    assert [o.result.created for o in first if isinstance(o, Created)] == [True] * 4
    assert [o.result.created for o in again if isinstance(o, Created)] == [False] * 4 + [True]
    for did in ids:  # the replay wrote nothing, not even under its own actor
        assert actors(app, did) == [("ENQUEUED", "svc-a")]


def test_bad_items_fail_alone_and_their_neighbours_are_written(app):
    good = [uuid.uuid4() for _ in range(6)]
    bad_tier, bad_both = uuid.uuid4(), uuid.uuid4()
    items = [(req(good[0]), "svc-a"), (req(bad_tier, tier="no-such-tier"), "svc-a"),
             (req(good[1]), "svc-a"), (req(good[2]), "svc-a"),
             (req(bad_both, opened_at=DUE), "svc-a"), (req(good[3]), "svc-a"),
             (req(good[4]), "svc-a"), (req(good[5]), "svc-a")]
    outcomes, batcher = submit_all(app, items)
    assert batcher.batches == 1
    assert isinstance(outcomes[1], UnknownTier)
    assert isinstance(outcomes[4], InvalidInput)
    assert "exactly one of due_at" in str(outcomes[4])
    # the error is the one a lone request gets: not prefixed with a batch position
    assert not str(outcomes[1]).startswith("request ")
    for i in (0, 2, 3, 5, 6, 7):
        assert isinstance(outcomes[i], Created) and outcomes[i].result.created, outcomes[i]
    for did in good:
        assert actors(app, did) == [("ENQUEUED", "svc-a")]
    assert app.store.get(bad_tier) is None and app.store.get(bad_both) is None


def test_a_batch_of_bad_items_only_writes_nothing(app):
    ids = [uuid.uuid4() for _ in range(3)]
    outcomes, _ = submit_all(app, [(req(d, materiality="12.3.4"), "svc-a") for d in ids])
    assert all(isinstance(o, InvalidInput) for o in outcomes)
    assert all(app.store.get(d) is None for d in ids)


def test_each_ledger_row_carries_its_own_tokens_name(app):
    ids = [uuid.uuid4() for _ in range(9)]
    names = ["svc-a", "svc-b", "svc-c"]
    outcomes, batcher = submit_all(app, [(req(d), names[i % 3]) for i, d in enumerate(ids)])
    assert batcher.batches == 1
    assert all(isinstance(o, Created) and o.result.created for o in outcomes)
    for i, did in enumerate(ids):
        assert actors(app, did) == [("ENQUEUED", names[i % 3])]


def test_cancelled_dispute_is_a_conflict_for_its_request_only(app):
    from escalation.service_layer.cancel import cancel

    did, other = uuid.uuid4(), uuid.uuid4()
    submit_all(app, [(req(did), "svc-a")])
    cancel(did, scheduler=app.scheduler, store=app.store, actor="svc-a", reason="resolved")
    outcomes, _ = submit_all(app, [(req(did), "svc-a"), (req(other), "svc-a")])
    assert isinstance(outcomes[0], ConflictError)
    assert isinstance(outcomes[1], Created) and outcomes[1].result.created


@pytest.mark.parametrize("writers", [1, 2])
def test_more_requests_than_one_batch_holds(app, writers):
    batcher_max = 7
    ids = [uuid.uuid4() for _ in range(30)]
    batcher = CreateBatcher(app, max_batch=batcher_max, writers=writers)

    async def go() -> list[Created | BaseException]:
        return await asyncio.gather(*(batcher.submit(req(d), "svc-a") for d in ids),
                                    return_exceptions=True)

    try:
        outcomes = asyncio.run(go())
    finally:
        batcher.close()
    assert batcher.largest == batcher_max and batcher.batches == 5
    assert all(isinstance(o, Created) and o.result.created for o in outcomes)
    assert all(actors(app, d) == [("ENQUEUED", "svc-a")] for d in ids)


def test_the_batch_clock_is_redis_time(app):
    before = app.scheduler.time()
    outcomes, _ = submit_all(app, [(req(), "svc-a") for _ in range(3)])
    after = app.scheduler.time()
    stamps = {o.now for o in outcomes if isinstance(o, Created)}
    assert len(stamps) == 1  # one TIME per batch
    assert before <= stamps.pop() <= after


def test_a_dropped_pooled_connection_is_replaced_and_the_batch_written(app, engine):
    """The writers' pool has no pre-ping: a connection the server dropped fails the first
    try, and the batch is written again on a fresh connection."""
    import sqlalchemy as sa

    batcher = CreateBatcher(app, writers=1)

    async def go(ids: list[uuid.UUID]) -> list[Created | BaseException]:
        return await asyncio.gather(*(batcher.submit(req(d), "svc-a") for d in ids),
                                    return_exceptions=True)

    try:
        asyncio.run(go([uuid.uuid4()]))  # the pool now holds one connection
        with batcher._ledger.engine.connect() as conn:  # that same connection
            pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        with engine.connect() as admin:
            assert admin.execute(sa.text("SELECT pg_terminate_backend(:p)"),
                                 {"p": pid}).scalar_one()
        ids = [uuid.uuid4() for _ in range(3)]
        outcomes = asyncio.run(go(ids))
    finally:
        batcher.close()
    assert all(isinstance(o, Created) and o.result.created for o in outcomes), outcomes
    assert all(actors(app, d) == [("ENQUEUED", "svc-a")] for d in ids)
