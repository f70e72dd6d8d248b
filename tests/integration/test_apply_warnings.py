"""Pre-breach warnings scheduled by the apply call (``ApplyOp.warnings``, apply.lua's warnings
argument; ``fire_due(warning_members=...)``, what the worker passes).

The script adds the warnings of the ops it applies, and only of those: a stale worker's op
(NOT_OWNER), a repeated apply (STALE_SEQ) or a cancelled member (MISSING) schedules nothing;
ZADD NX keeps an existing member's score; the wake marker is pushed when a new warning became
the earliest, as ``RedisWarnings.schedule`` does. ``fire_due`` with the fold schedules exactly
the members ``schedule_warnings`` would have.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import partial
from typing import Any

import orjson
import pytest
import redis

from escalation.adapters.redis_scheduler import RedisScheduler, ScriptRefused
from escalation.bootstrap import schedule_for, warnings_for
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation
from escalation.domain.materiality import Materiality
from escalation.ports import MAX_OP_WARNINGS, ApplyAction, ApplyOp, ApplyOutcome, WarningMember
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueOne, EnqueueRequest, enqueue_on_breach
from escalation.service_layer.fire import FireDue, FiringHooks, fire_due
from escalation.service_layer.warnings import warning_members

LEASE_MS = 30_000


def make_esc(due_in: timedelta, seq: int = 1) -> Escalation:
    base = datetime.now(UTC).replace(microsecond=0)
    return Escalation(
        dispute_id=uuid.uuid4(), tier="standard", due_at=base + due_in,
        materiality=Materiality(Decimal("10.00")), source_hash="a1", ladder="default",
        ladder_version=1, seq=seq, entered_tier_at=base - timedelta(hours=1),
        trace_id=uuid.uuid4().hex)


@pytest.fixture()
def sched(redis_client: redis.Redis, namespace: str, topology_shards: int) -> RedisScheduler:
    return RedisScheduler(redis_client, namespace=namespace, shards=topology_shards)


def promoted(esc: Escalation) -> Escalation:
    return esc.with_changes(tier="senior", seq=esc.seq + 1,
                            due_at=datetime.now(UTC).replace(microsecond=0) + timedelta(hours=4))


def warns(esc: Escalation, *due_ms: int) -> tuple[WarningMember, ...]:
    return tuple(WarningMember(esc.dispute_id, esc.seq, f"0.{50 + i}", ms)
                 for i, ms in enumerate(due_ms))


def zset(r: redis.Redis, sched: RedisScheduler, esc: Escalation) -> dict[str, int]:
    key = sched.keys_for(esc.dispute_id).warnings
    return {str(m): int(s) for m, s in r.zrange(key, 0, -1, withscores=True)
            if str(m).startswith(f"{esc.dispute_id}:")}


def test_applied_op_schedules_its_warnings_and_wakes(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    esc = make_esc(-timedelta(minutes=1))
    sched.enqueue(esc)
    item = sched.claim(10, LEASE_MS, "w").items[0]
    wake = sched.keys_for(esc.dispute_id).wake
    redis_client.delete(wake)
    nxt = promoted(esc)
    ws = warns(nxt, 2_000_000_000_000, 2_000_000_500_000)
    assert sched.apply([ApplyOp(nxt, ApplyAction.RESCHEDULE, item.token, {"seq": "2"}, ws)]) \
        == [ApplyOutcome.APPLIED]
    assert zset(redis_client, sched, esc) == {w.member: w.due_ms for w in ws}
    assert redis_client.lrange(wake, 0, -1) == ["1"]  # a new earliest warning


def test_stale_worker_repeat_and_missing_schedule_no_warning(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    esc = make_esc(-timedelta(minutes=1))
    sched.enqueue(esc)
    item = sched.claim(10, LEASE_MS, "w").items[0]
    nxt = promoted(esc)
    stale = ApplyOp(nxt, ApplyAction.RESCHEDULE, item.token + 1000, {"seq": "2"},
                    warns(nxt, 2_000_000_000_000))
    assert sched.apply([stale]) == [ApplyOutcome.NOT_OWNER]  # fencing token refused
    assert zset(redis_client, sched, esc) == {}
    ok = ApplyOp(nxt, ApplyAction.RESCHEDULE, item.token, {"seq": "2"})
    assert sched.apply([ok]) == [ApplyOutcome.APPLIED]
    again = ApplyOp(nxt, ApplyAction.RESCHEDULE, item.token, {"seq": "2"},
                    warns(nxt, 2_000_000_000_000))
    assert sched.apply([again]) == [ApplyOutcome.STALE_SEQ]  # seq guard
    assert zset(redis_client, sched, esc) == {}
    sched.cancel(esc.dispute_id)
    gone = ApplyOp(promoted(nxt), ApplyAction.RESCHEDULE, item.token, None,
                   warns(nxt, 2_000_000_000_000))
    assert sched.apply([gone]) == [ApplyOutcome.MISSING]
    assert zset(redis_client, sched, esc) == {}


def test_existing_member_keeps_its_score_and_an_earlier_one_means_no_wake(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    a, b = make_esc(-timedelta(minutes=1)), make_esc(-timedelta(minutes=1))
    sched.enqueue_many([a, b])
    items = {i.escalation.dispute_id: i for i in sched.claim(10, LEASE_MS, "w").items}
    na, nb = promoted(a), promoted(b)
    (wa,) = warns(na, 2_000_000_000_000)
    key = sched.keys_for(a.dispute_id).warnings
    redis_client.zadd(key, {wa.member: 7})  # already scheduled: keeps its score
    redis_client.zadd(key, {"00000000-0000-0000-0000-000000000000:1:0.50": 5})  # earliest
    wake = sched.keys_for(a.dispute_id).wake
    redis_client.delete(wake)
    ops = [ApplyOp(na, ApplyAction.RESCHEDULE, items[a.dispute_id].token, None, (wa,)),
           ApplyOp(nb, ApplyAction.RESCHEDULE, items[b.dispute_id].token, None,
                   warns(nb, 2_000_000_000_000))]
    assert sched.apply(ops) == [ApplyOutcome.APPLIED, ApplyOutcome.APPLIED]
    assert zset(redis_client, sched, a) == {wa.member: 7}
    assert zset(redis_client, sched, b) == {warns(nb, 2_000_000_000_000)[0].member:
                                            2_000_000_000_000}
    # the earliest member (score 5) is none of this call's: no wake (RedisWarnings.schedule's
    # rule); with several shards, b's ZSET may get b's warning as its new earliest
    if sched.keys_for(b.dispute_id).warnings == key:
        assert redis_client.llen(wake) == 0


def test_a_malformed_warnings_argument_is_refused_before_any_write(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    esc = make_esc(-timedelta(minutes=1))
    sched.enqueue(esc)
    item = sched.claim(10, LEASE_MS, "w").items[0]
    keys = sched.keys_for(esc.dispute_id)
    member = str(esc.dispute_id)
    scalars, fields, notify = RedisScheduler._encode_op(
        ApplyOp(promoted(esc), ApplyAction.RESCHEDULE, item.token), False)
    lists = orjson.dumps([fields, notify])
    kargs = [keys.pending, keys.review, keys.stats, keys.payload(member), keys.lock(member),
             keys.ready, keys.prio, keys.warnings, keys.wake]
    for bad in ('[2, "1:0.5", 5]', '[1, "", 5]', '[1, "1:0.5", 1.5]', '[1, "1:0.5", -1]',
                "{", '[1, 5, 5]', '[1, "1:0.5"]', '[[1, "1:0.5", 5]]',
                "[" + ",".join(['1, "1:0.5", 5'] * 17) + "]"):
        with pytest.raises(ScriptRefused):
            sched._run("apply", kargs, ["100", lists, *scalars, bad])
    assert sched.payload(esc.dispute_id)["seq"] == "1"  # nothing written
    assert zset(redis_client, sched, esc) == {}
    with pytest.raises(InvalidInput):
        sched.apply([ApplyOp(promoted(esc), ApplyAction.RESCHEDULE, item.token, None,
                             warns(esc, *range(MAX_OP_WARNINGS + 1)))])
    other = make_esc(timedelta(hours=1))
    with pytest.raises(InvalidInput):  # a warning of another dispute
        sched.apply([ApplyOp(promoted(esc), ApplyAction.RESCHEDULE, item.token, None,
                             warns(other, 5))])


# ------------------------------------------------------------------ fire_due with the fold
def _enqueue_due(app: Any, count: int) -> list[uuid.UUID]:
    ids = []
    now = app.scheduler.time()
    for _ in range(count):
        did = uuid.uuid4()
        enqueue_on_breach(
            EnqueueOne(request=EnqueueRequest(dispute_id=did, materiality="10.00",
                           source_hash=hashlib.sha256(did.bytes).hexdigest(),
                           opened_at=now - timedelta(hours=25)),
                       actor="test", default_ladder="dispute_review"),
            CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                      calendars=app.calendars),
        )
        ids.append(did)
    return ids


def test_fire_due_with_the_fold_schedules_what_schedule_warnings_would(app: Any) -> None:
    ids = _enqueue_due(app, 5)
    seen: list[list[Escalation]] = []
    members = partial(warning_members, ladders=app.ladders, calendars=app.calendars)
    report = fire_due(
        FireDue(batch_size=50, lease_ms=LEASE_MS, worker_id="w"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
        FiringHooks(on_scheduled=seen.append, warning_members=members),
    )
    assert report.recorded == report.applied == 5
    assert seen == []  # every escalation's warnings went with the apply call
    states = [app.store.get(did)[0] for did in ids]
    assert all(s.tier == "senior" for s in states)
    expected = members(states)
    assert len(expected) == 10  # senior: warn_at 0.50 and 0.75
    got = {m.member: m.due_ms for did in ids for m in
           (WarningMember.parse(x, s) for x, s in
            ((x, float(s)) for x, s in warnings_for(app).pending(did)))}
    assert got == {m.member: m.due_ms for m in expected}


def test_fire_due_overflow_goes_to_on_scheduled(app: Any) -> None:
    _enqueue_due(app, 2)
    seen: list[list[Escalation]] = []

    def many(escs: Sequence[Escalation]) -> list[WarningMember]:
        return [WarningMember(e.dispute_id, e.seq, f"0.{i:02d}", 2_000_000_000_000 + i)
                for e in escs for i in range(MAX_OP_WARNINGS + 1)]

    report = fire_due(
        FireDue(batch_size=50, lease_ms=LEASE_MS, worker_id="w"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
        FiringHooks(on_scheduled=seen.append, warning_members=many),
    )
    assert report.applied == 2
    assert [len(batch) for batch in seen] == [2]  # too many to travel with the op
    hook = schedule_for(app)
    hook(seen[0])  # what the worker's hook then does: the ladder's own warnings
    assert all(len(warnings_for(app).pending(e.dispute_id)) == 2 for e in seen[0])
