"""The Lua scripts against Redis: shipped in the package and argument-checked (their text,
headers and keys are checked without Redis in tests/unit/test_lua_scripts.py).

Whether the built wheel carries every script is checked against the wheel itself in
tests/e2e/test_installed_wheel.py (an editable install would read the checkout). Bad
arguments must raise before the first write (Redis has no rollback).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import redis

from escalation.adapters.redis_keys import Keys
from escalation.adapters.redis_scheduler import (
    RedisScheduler,
    escalation_to_payload,
    payload_to_escalation,
    script_source,
)
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation
from escalation.domain.materiality import Materiality
from escalation.ports import ApplyAction, ApplyOp, ApplyOutcome


def make_esc(due_in: timedelta, **changes: object) -> Escalation:
    now = datetime.now(UTC).replace(microsecond=0)
    esc = Escalation(
        dispute_id=uuid.uuid4(),
        tier="standard",
        due_at=now + due_in,
        materiality=Materiality(Decimal("980.50")),
        source_hash="d4e5f6",
        ladder="default",
        ladder_version=2,
        seq=1,
        entered_tier_at=now,
        trace_id="trace-1",
    )
    return esc.with_changes(**changes) if changes else esc


SOURCE_LUA = sorted(
    p.stem for p in (Path(__file__).resolve().parents[2] / "escalation/adapters/lua").glob("*.lua")
)


# ----------------------------------------------------------------- bad arguments
def test_enqueue_with_a_bad_item_writes_nothing(redis_client: redis.Redis, namespace: str) -> None:
    k = Keys(namespace, 0)
    script = redis_client.register_script(script_source("enqueue"))
    good, bad = str(uuid.uuid4()), str(uuid.uuid4())
    argv = [good, "1000", "1", "tier", "standard", bad, "soon", "1", "tier", "standard"]
    with pytest.raises(redis.ResponseError, match="EINVAL enqueue"):
        script(keys=[k.pending, k.wake, k.stats, k.warnings, k.payload(good), k.payload(bad)],
               args=["", "", *argv])
    assert redis_client.zcard(k.pending) == 0
    assert redis_client.exists(k.payload(good), k.payload(bad), k.wake, k.stats) == 0


def test_enqueue_refuses_keys_that_do_not_match_the_member(
    redis_client: redis.Redis, namespace: str
) -> None:
    k = Keys(namespace, 0)
    script = redis_client.register_script(script_source("enqueue"))
    member = str(uuid.uuid4())
    with pytest.raises(redis.ResponseError, match="payload key"):
        script(
            keys=[k.pending, k.wake, k.stats, k.warnings, k.payload("other")],
            args=["", "", member, "1000", "1", "tier", "x"],
        )
    assert redis_client.zcard(k.pending) == 0


@pytest.mark.parametrize(
    ("lease", "worker", "max_items"),
    [("abc", "w", "10"), ("0", "w", "10"), ("1000", "", "10"), ("1000", "w", "501")],
)
def test_claim_with_bad_arguments_writes_nothing(
    redis_client: redis.Redis, namespace: str, lease: str, worker: str, max_items: str
) -> None:
    sched = RedisScheduler(redis_client, namespace=namespace)
    esc = make_esc(-timedelta(minutes=1))
    sched.enqueue(esc)
    k = Keys(namespace, 0)
    member = str(esc.dispute_id)
    script = redis_client.register_script(script_source("claim"))
    with pytest.raises(redis.ResponseError, match="EINVAL claim"):
        script(
            keys=[k.pending, k.fence, k.stats, k.payload(member), k.lock(member)],
            args=[lease, worker, max_items, member],
        )
    assert redis_client.exists(k.fence, k.lock(member)) == 0
    assert redis_client.hget(k.stats, "claimed") is None
    assert redis_client.zscore(k.pending, member) == int(esc.due_at.timestamp() * 1000)


def test_apply_with_one_bad_op_applies_none(redis_client: redis.Redis, namespace: str) -> None:
    sched = RedisScheduler(redis_client, namespace=namespace)
    esc = make_esc(timedelta(minutes=5))
    sched.enqueue(esc)
    k = Keys(namespace, 0)
    member = str(esc.dispute_id)
    # op: id, action, token, seq, due_ms, create; its fields and notify lists go to ARGV[2]
    good = [member, "remove", "", "9", "1", "0"]
    good_lists = '[], ["event", "removed"]'
    other = str(uuid.uuid4())
    script = redis_client.register_script(script_source("apply"))
    op_keys = [k.pending, k.review, k.stats, k.payload(member), k.lock(member)]
    op_keys += [k.payload(other), k.lock(other), k.ready, k.prio]
    bad_ops = (  # the other op and its two lists
        ([other, "explode", "", "1", "1", "0"], "[], []"),  # unknown action
        ([other, "remove", "", "1", "1"], "[], []"),  # truncated: 5 strings
        ([other, "park", "", "1", "1", "0"], "[], []"),  # park without fields
        ([other, "remove", "", "1", "1", "0"], '[], ["a", "b", "c"]'),  # odd notify
        ([other, "remove", "", "1", "1", "0"], '[], "not a list"'),  # notify not an array
        ([other, "remove", "", "1", "1", "0"], '[], ["", "b"]'),  # empty field name
        ([other, "remove", "", "1", "1", "0"], '[], ["a", 5]'),  # a value not a string
        ([other, "remove", "x", "1", "1", "0"], "[], []"),  # token not an integer
        ([other, "remove", "", "1", "1", "0"], "[]"),  # the other op's lists missing
    )
    for bad, lists in bad_ops:
        with pytest.raises(redis.ResponseError, match="EINVAL apply"):
            script(keys=op_keys, args=["1000", f"[{good_lists}, {lists}]", *good, *bad])
    with pytest.raises(redis.ResponseError, match="EINVAL apply"):  # not JSON at all
        script(keys=op_keys, args=["1000", "not json", *good, *good])
    assert redis_client.zscore(k.pending, member) is not None
    assert sched.payload(member) is not None
    assert redis_client.exists(k.review) == 0
    # the good op alone is well formed: it applies
    alone = script(keys=[k.pending, k.review, k.stats, k.payload(member), k.lock(member),
                         k.ready, k.prio], args=["1000", f"[{good_lists}]", *good])
    assert alone in ("a", b"a")  # one outcome character per op: applied
    assert redis_client.zscore(k.pending, member) is None
    assert redis_client.xlen(k.review) == 1


# ----------------------------------------------------------------- batched writes
def test_apply_sees_an_earlier_op_on_the_same_member_in_one_call(
    redis_client: redis.Redis, namespace: str
) -> None:
    """apply.lua collects the ZSET writes of a call; an op whose member repeats an earlier
    op's must still see that op's writes (reschedule then remove: gone; park then
    reschedule: pending at the second due time)."""
    sched = RedisScheduler(redis_client, namespace=namespace)
    gone, back = make_esc(timedelta(minutes=5)), make_esc(timedelta(minutes=5))
    sched.enqueue_many([gone, back])
    later = gone.due_at + timedelta(hours=1)
    ops = [
        ApplyOp(gone.with_changes(seq=2, due_at=later), ApplyAction.RESCHEDULE),
        ApplyOp(back.with_changes(seq=2), ApplyAction.PARK),
        ApplyOp(gone.with_changes(seq=3), ApplyAction.REMOVE),
        ApplyOp(back.with_changes(seq=3, due_at=later), ApplyAction.RESCHEDULE),
    ]
    assert sched.apply(ops) == [ApplyOutcome.APPLIED] * 4
    k = Keys(namespace, 0)
    assert redis_client.zscore(k.pending, str(gone.dispute_id)) is None
    assert sched.payload(str(gone.dispute_id)) is None
    assert redis_client.zscore(k.pending, str(back.dispute_id)) == int(later.timestamp() * 1000)
    assert sched.payload(str(back.dispute_id))["seq"] == "3"  # type: ignore[index]


def test_claim_hands_out_consecutive_fencing_tokens_in_candidate_order(
    redis_client: redis.Redis, namespace: str
) -> None:
    """One INCRBY per claim call: tokens are consecutive, each lock holds its own token."""
    sched = RedisScheduler(redis_client, namespace=namespace)
    escs = [make_esc(timedelta(seconds=-10 + i)) for i in range(5)]
    sched.enqueue_many(escs)
    k = Keys(namespace, 0)
    redis_client.set(k.fence, "41")
    got = sched.claim(5, 30_000, "w1")
    tokens = [item.token for item in got.items]
    assert tokens == [42, 43, 44, 45, 46]
    assert [item.escalation.dispute_id for item in got.items] == [e.dispute_id for e in escs]
    for item in got.items:
        lock = redis_client.get(k.lock(str(item.escalation.dispute_id)))
        assert lock in (f"{item.token}:w1", f"{item.token}:w1".encode())
        assert item.score_ms == int(item.escalation.due_at.timestamp() * 1000)
    assert int(redis_client.get(k.fence) or 0) == 46
    assert redis_client.zcard(k.ready) == 0
    assert int(redis_client.hget(k.stats, "claimed") or 0) == 5


def test_claim_with_a_corrupt_fence_counter_writes_nothing(
    redis_client: redis.Redis, namespace: str
) -> None:
    """The fence counter is read before the first write: a value that is not an integer
    refuses the claim with nothing moved or locked."""
    sched = RedisScheduler(redis_client, namespace=namespace)
    esc = make_esc(timedelta(seconds=-5))
    sched.enqueue(esc)
    k = Keys(namespace, 0)
    redis_client.set(k.fence, "12abc")
    with pytest.raises(redis.ResponseError, match="EINVAL claim: fence"):
        sched.claim(10, 30_000, "w1")
    assert redis_client.zscore(k.pending, str(esc.dispute_id)) is not None
    assert redis_client.zcard(k.ready) == 0
    assert redis_client.exists(k.lock(str(esc.dispute_id))) == 0


def test_cancel_refuses_keys_of_another_dispute(redis_client: redis.Redis, namespace: str) -> None:
    sched = RedisScheduler(redis_client, namespace=namespace)
    esc = make_esc(timedelta(minutes=5))
    sched.enqueue(esc)
    k = Keys(namespace, 0)
    member = str(esc.dispute_id)
    script = redis_client.register_script(script_source("cancel"))
    with pytest.raises(redis.ResponseError, match="EINVAL cancel"):
        script(keys=[k.pending, k.payload(member), k.lock(member), k.stats], args=["other-id"])
    assert redis_client.zscore(k.pending, member) is not None


def test_release_lock_refuses_an_empty_owner(redis_client: redis.Redis, namespace: str) -> None:
    script = redis_client.register_script(script_source("release_lock"))
    key = Keys(namespace, 0).lock("x")
    redis_client.set(key, "")
    with pytest.raises(redis.ResponseError, match="EINVAL release_lock"):
        script(keys=[key], args=[""])
    assert redis_client.exists(key) == 1


# ----------------------------------------------------------------- payload mapping
def test_payload_round_trips_an_escalation_with_optional_fields() -> None:
    esc = make_esc(
        timedelta(days=2),
        external_id="CFPB-4411",
        regulatory_deadline=datetime(2030, 1, 1, tzinfo=UTC),
        seq=5,
    )
    fields = escalation_to_payload(esc)
    assert fields["l"] == "default@2"
    assert fields["m"] == "980.50"
    assert payload_to_escalation(str(esc.dispute_id), fields) == esc


def test_payload_omits_unset_optional_fields() -> None:
    fields = escalation_to_payload(make_esc(timedelta(days=1)))
    assert not {"x", "d", "ds", "z", "c"} & fields.keys()


def test_payload_without_required_field_is_refused() -> None:
    fields = escalation_to_payload(make_esc(timedelta(days=1)))
    del fields["seq"]
    with pytest.raises(InvalidInput, match="seq"):
        payload_to_escalation(uuid.uuid4(), fields)


def test_claim_reports_the_due_time_with_and_without_weights(
    redis_client: redis.Redis, namespace: str
) -> None:
    """claim.lua scores ready by due - weight * aging and reports the due time back: with a
    prio HASH (weights read, one weighted and one absent member) and without one (no
    weights read at all)."""
    sched = RedisScheduler(redis_client, namespace=namespace)
    k = Keys(namespace, 0)
    escs = [make_esc(timedelta(seconds=-30 + i)) for i in range(3)]
    sched.enqueue_many(escs)
    redis_client.hset(k.prio, str(escs[2].dispute_id), "2")
    got = sched.claim(10, 30_000, "w1")
    assert got.items[0].escalation.dispute_id == escs[2].dispute_id  # weighted first
    assert {i.escalation.dispute_id: i.score_ms for i in got.items} == {
        e.dispute_id: int(e.due_at.timestamp() * 1000) for e in escs}
    other = f"{namespace}:plain"  # keys "{<namespace>:plain:0}...": cleaned up too
    plain = RedisScheduler(redis_client, namespace=other)
    more = [make_esc(timedelta(seconds=-30 + i)) for i in range(3)]
    plain.enqueue_many(more)
    assert redis_client.exists(Keys(other, 0).prio) == 0
    items = plain.claim(10, 30_000, "w1").items
    assert [(i.escalation.dispute_id, i.score_ms) for i in items] == [
        (e.dispute_id, int(e.due_at.timestamp() * 1000)) for e in more]


def test_claim_promotes_at_most_promote_max_due_members_earliest_first(
    redis_client: redis.Redis, namespace: str
) -> None:
    """The promoted members leave pending by rank: exactly the promote_max earliest due ones
    move to ready; later due and future members stay in pending with their scores."""
    sched = RedisScheduler(redis_client, namespace=namespace)
    k = Keys(namespace, 0)
    due = [make_esc(timedelta(seconds=-50 + i)) for i in range(5)]
    future = [make_esc(timedelta(minutes=5 + i)) for i in range(3)]
    sched.enqueue_many(due + future)
    before = dict(redis_client.zrange(k.pending, 0, -1, withscores=True))
    script = redis_client.register_script(script_source("claim"))
    # promote_max 2, no candidates: only the promotion step runs
    script(keys=[k.pending, k.fence, k.stats, k.ready, k.prio],
           args=["30000", "w1", "10", "60000", "2", "0"])
    moved = [str(e.dispute_id) for e in due[:2]]
    assert dict(redis_client.zrange(k.ready, 0, -1, withscores=True)) == {
        m: before[m] for m in moved}
    assert dict(redis_client.zrange(k.pending, 0, -1, withscores=True)) == {
        m: s for m, s in before.items() if m not in moved}
    script(keys=[k.pending, k.fence, k.stats, k.ready, k.prio],
           args=["30000", "w1", "10", "60000", "100", "0"])
    assert redis_client.zcard(k.ready) == 5
    assert sorted(redis_client.zrange(k.pending, 0, -1)) == sorted(
        str(e.dispute_id) for e in future)


def test_claim_around_a_locked_head_member_leaves_it_in_ready(
    redis_client: redis.Redis, namespace: str
) -> None:
    """A locked member at the top of ready is skipped (contended) and stays in ready; the
    members claimed after it leave ready (not by rank: they are not the head's first)."""
    sched = RedisScheduler(redis_client, namespace=namespace)
    k = Keys(namespace, 0)
    escs = [make_esc(timedelta(seconds=-30 + i)) for i in range(4)]
    sched.enqueue_many(escs)
    first = str(escs[0].dispute_id)
    redis_client.set(k.lock(first), "999:other", px=30_000)
    got = sched.claim(3, 30_000, "w1")
    assert [i.escalation.dispute_id for i in got.items] == [e.dispute_id for e in escs[1:]]
    assert got.contended >= 1
    assert redis_client.zrange(k.ready, 0, -1) == [first]
    assert sorted(redis_client.zrange(k.pending, 0, -1)) == sorted(
        str(e.dispute_id) for e in escs[1:])
