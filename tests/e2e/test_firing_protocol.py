"""The firing protocol end to end on real Redis + PostgreSQL (in-process worker batches)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from escalation.adapters.redis_scheduler import (
    LEGACY_NAMES,
    PAYLOAD_FIELDS,
    payload_to_escalation,
)
from escalation.domain.decide import decide
from escalation.ports import ApplyAction, ApplyOp, ApplyOutcome, RecordStatus
from escalation.service_layer.cancel import cancel
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueMany
from escalation.service_layer.fire import FireDue, fire_due
from tests.e2e.helpers import due_requests, enqueue


def fire(app: Any, worker: str = "w1", batch: int = 50, lease_ms: int = 5000) -> Any:
    return fire_due(
        FireDue(batch_size=batch, lease_ms=lease_ms, worker_id=worker),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )


def events(app: Any, did: Any) -> list[str]:
    return [r.match_decision for r in app.store.trail(did)]


def test_due_escalations_are_promoted_once_and_recorded_before_apply(app: Any) -> None:
    now = app.scheduler.time()
    ids = enqueue(app, due_requests(20, now))
    report = fire(app)
    assert report.claimed == 20 and report.recorded == 20 and report.applied == 20
    for did in ids:
        assert events(app, did) == ["ENQUEUED", "PROMOTED_TO_SENIOR"]
        state, status = app.store.get(did)
        assert state.tier == "senior" and state.seq == 2 and status.value == "pending"
        payload = app.scheduler.payload(did)
        assert payload["t"] == "senior" and int(payload["seq"]) == 2
    # the next tier's window (48 h) is in the future: nothing more to fire
    again = fire(app)
    assert again.claimed == 0 and again.recorded == 0
    assert all(len(app.store.trail(d)) == 2 for d in ids)



def test_payloads_written_with_the_long_field_names_fire_once_and_are_rewritten_short(
    app: Any,
) -> None:
    """An upgraded deployment finds payloads written by the earlier version (long field
    names) pending in Redis: they are claimed, recorded and applied like any other, and the
    apply's rewrite stores the short names."""
    now = app.scheduler.time()
    ids = enqueue(app, due_requests(6, now))
    for did in ids:
        key = app.scheduler.keys_for(did).payload(did)
        short = app.scheduler.payload(did)
        app.redis.delete(key)
        app.redis.hset(key, mapping={LEGACY_NAMES[k]: v for k, v in short.items()})
        assert "materiality" in app.redis.hkeys(key) and "m" not in app.redis.hkeys(key)
    report = fire(app)
    assert report.claimed == 6 and report.recorded == 6 and report.applied == 6
    for did in ids:
        assert events(app, did) == ["ENQUEUED", "PROMOTED_TO_SENIOR"]
        state, _status = app.store.get(did)
        payload = app.scheduler.payload(did)
        assert set(payload) <= set(PAYLOAD_FIELDS), payload
        assert payload["t"] == "senior" and int(payload["seq"]) == state.seq == 2
        assert payload_to_escalation(did, payload).tier == "senior"
    assert fire(app).claimed == 0

def test_future_escalation_is_not_fired(app: Any) -> None:
    now = app.scheduler.time()
    reqs = due_requests(1, now, past_s=-600)  # due in 10 minutes
    [did] = enqueue(app, reqs)
    assert fire(app).claimed == 0
    assert events(app, did) == ["ENQUEUED"]


def test_terminal_escalation_leaves_the_zset_and_never_reenters(app: Any) -> None:
    now = app.scheduler.time()
    [did] = enqueue(app, due_requests(1, now, tier="compliance"))
    report = fire(app)
    assert report.decisions == {"TERMINAL_ESCALATION": 1}
    assert app.scheduler.payload(did) is None
    assert app.redis.zscore(app.scheduler.keys_for(did).pending, str(did)) is None
    for _ in range(3):
        assert fire(app).claimed == 0
    state, status = app.store.get(did)
    assert status.value == "terminal"
    assert events(app, did) == ["ENQUEUED", "TERMINAL_ESCALATION"]


def test_enqueue_is_idempotent_per_dispute(app: Any) -> None:
    now = app.scheduler.time()
    reqs = due_requests(1, now, past_s=-600)
    [did] = enqueue(app, reqs)
    from escalation.service_layer.enqueue import enqueue_many

    again = enqueue_many(
        EnqueueMany(requests=reqs, actor="t", default_ladder="dispute_review"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )
    assert again[0].created is False
    assert events(app, did) == ["ENQUEUED"]


def test_clock_skew_a_worker_whose_host_clock_is_an_hour_ahead_fires_nothing_early(
    app: Any, monkeypatch: Any
) -> None:
    now = app.scheduler.time()
    [did] = enqueue(app, due_requests(1, now, past_s=-600))  # due in 10 minutes
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)
    assert fire(app).claimed == 0
    assert events(app, did) == ["ENQUEUED"]


def test_stale_worker_can_neither_record_nor_apply_after_its_lease_expired(app: Any) -> None:
    now = app.scheduler.time()
    [did] = enqueue(app, due_requests(1, now))
    stale = app.scheduler.claim(10, 200, "worker-a")  # 200 ms lease
    assert len(stale.items) == 1
    time.sleep(0.4)
    fresh = fire(app, worker="worker-b")
    assert fresh.recorded == 1
    item = stale.items[0]
    ladder = app.ladders.get(item.escalation.ladder, item.escalation.ladder_version)
    decision = decide(item.escalation, ladder, stale.now, app.calendars)
    [outcome] = app.store.record_decisions([(item, decision)], "worker-a")
    assert outcome.status is RecordStatus.STALE
    bogus = item.escalation.with_changes(seq=item.escalation.seq + 5, tier="compliance")
    [applied] = app.scheduler.apply([ApplyOp(bogus, ApplyAction.REMOVE, item.token)])
    assert applied is ApplyOutcome.NOT_OWNER
    assert app.scheduler.payload(did)["t"] == "senior"
    assert events(app, did) == ["ENQUEUED", "PROMOTED_TO_SENIOR"]


def test_cancel_while_a_worker_holds_the_lock_is_final(app: Any) -> None:
    now = app.scheduler.time()
    [did] = enqueue(app, due_requests(1, now))
    claim = app.scheduler.claim(10, 5000, "worker-a")
    cancel(did, scheduler=app.scheduler, store=app.store, actor="svc", reason="resolved")
    item = claim.items[0]
    ladder = app.ladders.get(item.escalation.ladder, item.escalation.ladder_version)
    decision = decide(item.escalation, ladder, claim.now, app.calendars)
    [outcome] = app.store.record_decisions([(item, decision)], "worker-a")
    assert outcome.status in (RecordStatus.CLOSED, RecordStatus.STALE)
    [applied] = app.scheduler.apply([ApplyOp(item.escalation.with_changes(seq=9),
                                             ApplyAction.RESCHEDULE, item.token)])
    assert applied in (ApplyOutcome.MISSING, ApplyOutcome.NOT_OWNER)
    assert app.scheduler.payload(did) is None
    assert app.redis.zscore(app.scheduler.keys_for(did).pending, str(did)) is None
    assert events(app, did) == ["ENQUEUED", "CANCELLED"]


def test_stuck_member_is_reported_recorded_and_repaired_from_postgres(app: Any) -> None:
    now = app.scheduler.time()
    [did] = enqueue(app, due_requests(1, now))
    app.redis.delete(app.scheduler.keys_for(did).payload(did))
    report = fire(app)
    assert report.stuck == 1
    assert "STUCK_MEMBER" in events(app, did)
    # repaired: the payload is back and the escalation fires normally
    deadline = time.monotonic() + 3
    while fire(app).recorded == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert events(app, did)[-1] == "PROMOTED_TO_SENIOR"


def test_full_drain_zcard_drops_by_exactly_the_past_due_terminal_members(app: Any) -> None:
    now = app.scheduler.time()
    past = enqueue(app, due_requests(7, now, tier="compliance"))
    future = enqueue(app, due_requests(5, now + timedelta(minutes=5), tier="compliance"))
    def zcard_pending() -> int:
        return sum(int(app.redis.zcard(k.pending)) for k in app.scheduler.shard_keys())

    before = zcard_pending()
    fire(app)
    assert before - zcard_pending() == len(past)
    assert all(app.scheduler.payload(d) is not None for d in future)
