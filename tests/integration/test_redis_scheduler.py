"""RedisScheduler against a real Redis (DB 9, a fresh key namespace per test).

The scheduler's basic guarantees (due / future / double lock / full drain), plus its safety
rules: atomic claim with Redis TIME (ADR 0005), fencing tokens, seq-guarded apply.
Lease expiry is simulated where noted (lock deleted + score moved into the past: exactly
what the passage of ``lease_ms`` does) so the tests do not depend on timing.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import redis
from structlog.testing import capture_logs

from escalation.adapters.redis_client import make_redis
from escalation.adapters.redis_keys import Keys
from escalation.adapters.redis_scheduler import RedisScheduler, payload_to_escalation
from escalation.domain.errors import ConflictError, InvalidInput
from escalation.domain.escalation import Escalation, Status
from escalation.domain.materiality import Materiality
from escalation.domain.timeutil import to_ms
from escalation.ports import ApplyAction, ApplyOp, ApplyOutcome
from tests.redis_seed import (
    earliest_due_ms,
    fetch_due,
    pop_if_due,
    release_lock,
    try_acquire_lock,
)

LEASE_MS = 30_000


def make_esc(
    due_in: timedelta,
    *,
    seq: int = 1,
    tier: str = "standard",
    dispute_id: uuid.UUID | None = None,
    now: datetime | None = None,
) -> Escalation:
    base = now or datetime.now(UTC)
    base = base.replace(microsecond=base.microsecond // 1000 * 1000)  # Redis keeps ms
    return Escalation(
        dispute_id=dispute_id or uuid.uuid4(),
        tier=tier,
        due_at=base + due_in,
        materiality=Materiality(Decimal("1250.00")),
        source_hash="a1b2c3",
        ladder="default",
        ladder_version=1,
        seq=seq,
        entered_tier_at=base - timedelta(hours=1),
        trace_id=uuid.uuid4().hex,
    )


@pytest.fixture()
def sched(redis_client: redis.Redis, namespace: str, topology_shards: int) -> RedisScheduler:
    return RedisScheduler(redis_client, namespace=namespace, shards=topology_shards)


def keys(sched: RedisScheduler, esc: Escalation) -> Keys:
    return sched.keys_for(esc.dispute_id)


def expire_lease(r: redis.Redis, sched: RedisScheduler, esc: Escalation) -> None:
    """What the passage of lease_ms does: the lock's PX runs out, the re-score comes due."""
    k = keys(sched, esc)
    r.delete(k.lock(esc.dispute_id))
    r.zadd(k.pending, {str(esc.dispute_id): to_ms(sched.time()) - 1})


def promoted(esc: Escalation, due_in: timedelta = timedelta(hours=4)) -> Escalation:
    return esc.with_changes(tier="senior", seq=esc.seq + 1, due_at=datetime.now(UTC) + due_in)


# ------------------------------------------------------------------ basic guarantees
def test_due_member_is_claimable(sched: RedisScheduler) -> None:
    esc = make_esc(-timedelta(seconds=5))
    assert sched.enqueue(esc)
    assert str(esc.dispute_id) in [m for m, _ in fetch_due(sched, 10)]
    result = sched.claim(10, LEASE_MS, "worker-a")
    assert [i.escalation for i in result.items] == [esc]
    assert result.items[0].score_ms == to_ms(esc.due_at)


def test_future_member_is_not_claimable(sched: RedisScheduler) -> None:
    esc = make_esc(timedelta(minutes=10))
    assert sched.enqueue(esc)
    assert fetch_due(sched, 10) == []
    result = sched.claim(10, LEASE_MS, "worker-a")
    assert result.items == []
    assert result.next_due_ms == to_ms(esc.due_at)


def test_second_lock_on_same_dispute_is_refused(sched: RedisScheduler) -> None:
    dispute = uuid.uuid4()
    assert try_acquire_lock(sched, dispute, 30_000, "worker-a")
    assert try_acquire_lock(sched, dispute, 30_000, "worker-b") is False
    assert release_lock(sched, dispute, "worker-b") is False  # not the owner: unchanged
    assert release_lock(sched, dispute, "worker-a") is True
    assert try_acquire_lock(sched, dispute, 30_000, "worker-b")


def test_full_drain_removes_exactly_the_past_due_members(
    sched: RedisScheduler, redis_client: redis.Redis, namespace: str
) -> None:
    past = [make_esc(-timedelta(seconds=s)) for s in (1, 5, 60, 3600, 86400)]
    future = [make_esc(timedelta(minutes=m)) for m in (5, 60, 600)]
    assert sched.enqueue_many(past + future) == [True] * 8
    def zcard_pending() -> int:
        return sum(int(redis_client.zcard(k.pending)) for k in sched.shard_keys())

    before = zcard_pending()
    result = sched.claim(50, LEASE_MS, "worker-a")
    assert {i.escalation.dispute_id for i in result.items} == {e.dispute_id for e in past}
    ops = [
        ApplyOp(i.escalation.with_changes(seq=i.escalation.seq + 1), ApplyAction.REMOVE, i.token)
        for i in result.items
    ]
    assert sched.apply(ops) == [ApplyOutcome.APPLIED] * len(past)
    assert before - zcard_pending() == len(past)
    assert earliest_due_ms(sched) == to_ms(future[0].due_at)


# ----------------------------------------------------------------- enqueue
def test_enqueue_is_idempotent_and_changes_nothing_the_second_time(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    esc = make_esc(timedelta(minutes=5))
    assert sched.enqueue(esc) is True
    later = esc.with_changes(due_at=esc.due_at + timedelta(days=1), tier="senior", seq=7)
    assert sched.enqueue(later) is False
    assert sched.payload(esc.dispute_id) == {
        "t": "standard",
        "l": "default@1",
        "seq": "1",
        "due_ms": str(to_ms(esc.due_at)),
        "e": str(to_ms(esc.entered_tier_at)),
        "m": "1250.00",
        "h": "a1b2c3",
        "r": esc.trace_id,
    }
    score = redis_client.zscore(keys(sched, esc).pending, str(esc.dispute_id))
    assert score is not None and int(score) == to_ms(esc.due_at)


def test_enqueue_many_reports_duplicates_in_input_order(sched: RedisScheduler) -> None:
    a, b = make_esc(timedelta(minutes=1)), make_esc(timedelta(minutes=2))
    assert sched.enqueue(a)
    assert sched.enqueue_many([a, b, b]) == [False, True, False]


def test_enqueue_refuses_a_terminal_escalation(sched: RedisScheduler) -> None:
    esc = make_esc(timedelta(minutes=1)).with_changes(status=Status.TERMINAL)
    with pytest.raises(ConflictError):
        sched.enqueue(esc)
    assert sched.payload(esc.dispute_id) is None


def test_enqueue_of_a_new_earliest_member_wakes_sleepers(
    redis_client: redis.Redis, namespace: str
) -> None:
    sched = RedisScheduler(redis_client, namespace=namespace)  # "earliest" is per shard
    assert sched.enqueue(make_esc(timedelta(minutes=10)))
    assert sched.wait_for_wake(0) is True  # first member is the earliest
    assert sched.enqueue(make_esc(timedelta(minutes=20)))
    assert sched.wait_for_wake(0) is False  # later than the earliest: no marker
    assert sched.enqueue(make_esc(timedelta(minutes=1)))
    assert sched.wait_for_wake(0.5) is True


def test_wake_list_is_trimmed_to_one_marker(
    redis_client: redis.Redis, namespace: str
) -> None:
    sched = RedisScheduler(redis_client, namespace=namespace)  # one shard: one wake list
    for minutes in (30, 20, 10):
        assert sched.enqueue(make_esc(timedelta(minutes=minutes)))
    assert redis_client.llen(Keys(namespace, 0).wake) == 1


def test_wait_for_wake_times_out_without_marker(sched: RedisScheduler) -> None:
    assert sched.wait_for_wake(0.1) is False


# ----------------------------------------------------------------- claim
def test_claim_rescores_to_now_plus_lease_and_locks_with_token(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    esc = make_esc(-timedelta(minutes=1))
    sched.enqueue(esc)
    result = sched.claim(10, LEASE_MS, "worker-a")
    (item,) = result.items
    k = keys(sched, esc)
    # re-scored to (its shard's claim time) + lease: shards are claimed in turn, each by its
    # own script with its own Redis TIME, and result.now is the last of them (on one server
    # with one shard they are the same instant; on a cluster a later shard's may be 1 ms on)
    score = redis_client.zscore(k.pending, str(esc.dispute_id))
    assert score is not None
    assert to_ms(result.now) - 1000 <= score - LEASE_MS <= to_ms(result.now)
    if sched.shards == 1:
        assert score == to_ms(result.now) + LEASE_MS
    assert redis_client.get(k.lock(esc.dispute_id)) == f"{item.token}:worker-a"
    ttl = redis_client.pttl(k.lock(esc.dispute_id))
    assert 0 < ttl <= LEASE_MS
    assert sched.claim(10, LEASE_MS, "worker-b").items == []  # not due again yet


def test_member_is_claimable_again_after_lease_expiry_with_larger_token(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    esc = make_esc(-timedelta(minutes=1))
    sched.enqueue(esc)
    first = sched.claim(10, LEASE_MS, "worker-a").items[0]
    expire_lease(redis_client, sched, esc)
    second = sched.claim(10, LEASE_MS, "worker-b").items[0]
    assert second.escalation.dispute_id == esc.dispute_id
    assert second.token > first.token


def test_real_short_lease_lets_the_member_come_due_again(sched: RedisScheduler) -> None:
    esc = make_esc(-timedelta(minutes=1))
    sched.enqueue(esc)
    first = sched.claim(10, 50, "worker-a").items[0]
    deadline = time.monotonic() + 3.0
    again = []
    while not again and time.monotonic() < deadline:
        time.sleep(0.02)
        again = sched.claim(10, 50, "worker-b").items
    assert again and again[0].token > first.token


def test_stuck_member_is_reported_and_removed(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    stuck, fine = make_esc(-timedelta(minutes=2)), make_esc(-timedelta(minutes=1))
    sched.enqueue_many([stuck, fine])
    redis_client.delete(keys(sched, stuck).payload(stuck.dispute_id))
    result = sched.claim(10, LEASE_MS, "worker-a")
    assert result.stuck == [str(stuck.dispute_id)]
    assert [i.escalation.dispute_id for i in result.items] == [fine.dispute_id]
    assert redis_client.zscore(keys(sched, stuck).pending, str(stuck.dispute_id)) is None
    assert sched.stats()["stuck"] == 1


def test_locked_member_is_skipped_as_lock_contention(sched: RedisScheduler) -> None:
    esc = make_esc(-timedelta(minutes=1))
    sched.enqueue(esc)
    assert try_acquire_lock(sched, esc.dispute_id, 30_000, "someone-else")
    result = sched.claim(10, LEASE_MS, "worker-a")
    assert result.items == []
    assert result.contended == 1
    assert sched.stats()["lock_contended"] == 1


def test_contended_window_does_not_starve_claim_of_later_due_members(
    redis_client: redis.Redis, namespace: str
) -> None:
    # one shard: the order asserted is the order within a shard (docs/sla.md)
    sched = RedisScheduler(redis_client, namespace=namespace)
    escs = [make_esc(-timedelta(minutes=60 - i)) for i in range(20)]
    sched.enqueue_many(escs)
    for esc in escs[:8]:  # the 8 earliest are held by another worker
        assert try_acquire_lock(sched, esc.dispute_id, 30_000, "other")
    result = sched.claim(5, LEASE_MS, "worker-a")
    assert [i.escalation.dispute_id for i in result.items] == [e.dispute_id for e in escs[8:13]]
    assert result.contended >= 5


def test_two_workers_drain_everything_exactly_once(sched: RedisScheduler) -> None:
    escs = [make_esc(-timedelta(seconds=i + 1)) for i in range(1200)]
    sched.enqueue_many(escs)
    seen: list[uuid.UUID] = []
    for _ in range(10):
        for worker in ("worker-a", "worker-b"):
            seen += [i.escalation.dispute_id for i in sched.claim(500, LEASE_MS, worker).items]
    assert len(seen) == len(set(seen)) == 1200


def test_claim_uses_redis_time_not_the_host_clock(
    sched: RedisScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CLOCK_SKEW: a worker whose host clock runs an hour ahead claims nothing early."""
    real_now = datetime.now(UTC)
    esc = make_esc(timedelta(minutes=10), now=real_now)
    sched.enqueue(esc)
    skewed = time.time() + 3600
    monkeypatch.setattr(time, "time", lambda: skewed)
    assert sched.claim(10, LEASE_MS, "skewed-worker").items == []
    assert fetch_due(sched, 10) == []
    assert pop_if_due(sched) is None
    assert abs(sched.time() - real_now) < timedelta(minutes=1)


def test_claim_argument_out_of_range_is_refused(sched: RedisScheduler) -> None:
    with pytest.raises(InvalidInput):
        sched.claim(501, LEASE_MS, "w")
    with pytest.raises(InvalidInput):
        sched.claim(10, 0, "w")
    with pytest.raises(InvalidInput):
        sched.claim(10, LEASE_MS, "")


# ----------------------------------------------------------------- pop_if_due
def test_pop_if_due_never_pops_a_future_member(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    future = make_esc(timedelta(minutes=5))
    sched.enqueue(future)
    assert pop_if_due(sched) is None
    assert redis_client.zscore(keys(sched, future).pending, str(future.dispute_id)) is not None
    past = make_esc(-timedelta(seconds=1))
    sched.enqueue(past)
    assert pop_if_due(sched) == (str(past.dispute_id), to_ms(past.due_at))
    assert pop_if_due(sched) is None


# ----------------------------------------------------------------- apply
def test_stale_worker_cannot_apply_after_lease_expired(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    esc = make_esc(-timedelta(minutes=1))
    sched.enqueue(esc)
    a = sched.claim(10, LEASE_MS, "worker-a").items[0]
    expire_lease(redis_client, sched, esc)
    b = sched.claim(10, LEASE_MS, "worker-b").items[0]
    k = keys(sched, esc)
    score_before = redis_client.zscore(k.pending, str(esc.dispute_id))
    payload_before = sched.payload(esc.dispute_id)
    op_a = ApplyOp(promoted(esc), ApplyAction.RESCHEDULE, a.token, {"dispute_id": "x"})
    assert sched.apply([op_a]) == [ApplyOutcome.NOT_OWNER]
    assert sched.payload(esc.dispute_id) == payload_before
    assert redis_client.zscore(k.pending, str(esc.dispute_id)) == score_before
    assert redis_client.get(k.lock(esc.dispute_id)) == f"{b.token}:worker-b"
    assert redis_client.xlen(k.review) == 0
    op_b = ApplyOp(promoted(esc), ApplyAction.RESCHEDULE, b.token, {"dispute_id": "x"})
    assert sched.apply([op_b]) == [ApplyOutcome.APPLIED]
    assert redis_client.xlen(k.review) == 1


def test_reschedule_writes_payload_scores_due_and_releases_lock(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    esc = make_esc(-timedelta(minutes=1))
    sched.enqueue(esc)
    item = sched.claim(10, LEASE_MS, "worker-a").items[0]
    nxt = promoted(esc).with_changes(external_id="CFPB-1")
    notify = {"dispute_id": str(esc.dispute_id), "to_tier": "senior"}
    assert sched.apply([ApplyOp(nxt, ApplyAction.RESCHEDULE, item.token, notify)]) == [
        ApplyOutcome.APPLIED
    ]
    k = keys(sched, esc)
    assert redis_client.zscore(k.pending, str(esc.dispute_id)) == to_ms(nxt.due_at)
    assert redis_client.exists(k.lock(esc.dispute_id)) == 0
    fields = sched.payload(esc.dispute_id)
    assert fields is not None
    assert (fields["t"], fields["seq"], fields["x"]) == ("senior", "2", "CFPB-1")
    ((_, entry),) = redis_client.xrange(k.review)
    assert entry == notify


def test_apply_stores_non_ascii_payload_and_notification_bytes_unchanged(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    """apply.lua's pair lists travel as UTF-8 JSON (orjson): payload and stream entry hold
    exactly the UTF-8 bytes of the values (what the ASCII-escaped JSON gave after cjson), and
    the claim decodes them back (trusted decode)."""
    esc = make_esc(-timedelta(minutes=1))
    sched.enqueue(esc)
    item = sched.claim(10, LEASE_MS, "worker-a").items[0]
    odd = "caf\u00e9 \u2028 \U0001f600 \"q\" \\ /"
    nxt = promoted(esc).with_changes(external_id=odd, trace_id="tr-\u00e9",
                                     due_at=esc.due_at - timedelta(seconds=1))
    notify = {"dispute_id": str(esc.dispute_id), "from_tier": odd, "trace_id": "tr-\u00e9"}
    assert sched.apply([ApplyOp(nxt, ApplyAction.RESCHEDULE, item.token, notify)]) == [
        ApplyOutcome.APPLIED]
    k = keys(sched, esc)
    # the client decodes replies as UTF-8 (invalid bytes -> U+FFFD, which ``odd`` does not
    # hold), on one node, a Cluster or Sentinel alike: equal strings mean the stored bytes
    # are exactly the values' UTF-8 encoding (an escaped or re-encoded form reads differently)
    assert redis_client.hget(k.payload(esc.dispute_id), "x") == odd
    ((_, entry),) = redis_client.xrange(k.review)
    assert entry == notify
    again = sched.claim(10, LEASE_MS, "worker-a").items
    assert [i.escalation for i in again] == [nxt]


def test_repeated_apply_is_a_no_op(sched: RedisScheduler, redis_client: redis.Redis) -> None:
    esc = make_esc(-timedelta(minutes=1))
    sched.enqueue(esc)
    item = sched.claim(10, LEASE_MS, "worker-a").items[0]
    op = ApplyOp(promoted(esc), ApplyAction.RESCHEDULE, item.token, {"event": "promoted"})
    assert sched.apply([op]) == [ApplyOutcome.APPLIED]
    k = keys(sched, esc)
    state = (sched.payload(esc.dispute_id), redis_client.zscore(k.pending, str(esc.dispute_id)))
    assert sched.apply([op]) == [ApplyOutcome.STALE_SEQ]
    owner_less = ApplyOp(promoted(esc), ApplyAction.REMOVE)
    assert sched.apply([owner_less]) == [ApplyOutcome.STALE_SEQ]
    assert (
        sched.payload(esc.dispute_id),
        redis_client.zscore(k.pending, str(esc.dispute_id)),
    ) == state
    assert redis_client.xlen(k.review) == 1


def test_terminal_remove_never_re_adds_the_member(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    """ZSET_DRIFT prevented: once removed, no later apply brings the member back."""
    esc = make_esc(-timedelta(minutes=1), tier="compliance")
    sched.enqueue(esc)
    item = sched.claim(10, LEASE_MS, "worker-a").items[0]
    done = esc.with_changes(seq=2, status=Status.TERMINAL)
    assert sched.apply([ApplyOp(done, ApplyAction.REMOVE, item.token)]) == [ApplyOutcome.APPLIED]
    k = keys(sched, esc)
    late = ApplyOp(promoted(esc), ApplyAction.RESCHEDULE, item.token)
    assert sched.apply([late]) == [ApplyOutcome.MISSING]
    assert sched.apply([ApplyOp(promoted(esc), ApplyAction.RESCHEDULE)]) == [ApplyOutcome.MISSING]
    assert redis_client.zcard(k.pending) == 0
    assert sched.payload(esc.dispute_id) is None


def test_park_removes_member_but_keeps_payload_with_new_seq(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    esc = make_esc(timedelta(hours=1))
    sched.enqueue(esc)
    paused = esc.with_changes(seq=2, status=Status.PAUSED)
    assert sched.apply([ApplyOp(paused, ApplyAction.PARK)]) == [ApplyOutcome.APPLIED]
    assert redis_client.zcard(keys(sched, esc).pending) == 0
    fields = sched.payload(esc.dispute_id)
    assert fields is not None and fields["seq"] == "2"


def test_cancel_while_worker_holds_lock_makes_its_apply_missing(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    esc = make_esc(-timedelta(minutes=1))
    sched.enqueue(esc)
    item = sched.claim(10, LEASE_MS, "worker-a").items[0]
    assert sched.cancel(esc.dispute_id) is True
    k = keys(sched, esc)
    assert redis_client.exists(k.lock(esc.dispute_id)) == 0
    op = ApplyOp(promoted(esc), ApplyAction.RESCHEDULE, item.token, {"event": "promoted"})
    assert sched.apply([op]) == [ApplyOutcome.MISSING]
    assert redis_client.zcard(k.pending) == 0
    assert sched.payload(esc.dispute_id) is None
    assert redis_client.xlen(k.review) == 0
    assert sched.cancel(esc.dispute_id) is False


# ----------------------------------------------------------------- long-name (earlier) payloads
def legacy_payload(esc: Escalation, **extra: str) -> dict[str, str]:
    """The payload HASH as the version before the short field names wrote it (long names)."""
    fields = {
        "tier": esc.tier,
        "ladder": esc.ladder_key,
        "seq": str(esc.seq),
        "due_ms": str(to_ms(esc.due_at)),
        "entered_ms": str(to_ms(esc.entered_tier_at)),
        "materiality": str(esc.materiality),
        "source_hash": esc.source_hash,
        "trace_id": esc.trace_id,
    }
    return {**fields, **extra}


def write_legacy(redis_client: redis.Redis, sched: RedisScheduler, esc: Escalation,
                 **extra: str) -> str:
    """Replace ``esc``'s payload with its long-name form, raw (DEL + HSET); returns the key."""
    key = keys(sched, esc).payload(esc.dispute_id)
    redis_client.delete(key)
    redis_client.hset(key, mapping=legacy_payload(esc, **extra))
    return key


LONG_NAMES = {"tier", "ladder", "entered_ms", "materiality", "source_hash", "trace_id",
              "external_id", "deadline_ms", "deadlines", "tz", "cal"}


def test_a_long_name_payload_is_claimed_applied_and_rewritten_with_short_names(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    esc = make_esc(-timedelta(minutes=1)).with_changes(
        external_id="CFPB-77", regulatory_deadline=datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC),
        institution_tz="America/New_York", institution_calendar="us_federal")
    sched.enqueue(esc)
    key = write_legacy(redis_client, sched, esc, external_id="CFPB-77",
                       deadline_ms=str(to_ms(esc.regulatory_deadline)),  # type: ignore[arg-type]
                       tz="America/New_York", cal="us_federal")
    assert LONG_NAMES & set(redis_client.hkeys(key))
    [item] = sched.claim(10, LEASE_MS, "worker-a").items
    assert item.escalation == esc  # every field decoded from the long names
    # a stale seq is still refused by apply.lua (it reads ``seq``, a name both formats share)
    stale = promoted(esc).with_changes(seq=1)
    assert sched.apply([ApplyOp(stale, ApplyAction.RESCHEDULE)]) == [ApplyOutcome.STALE_SEQ]
    nxt = promoted(esc)
    assert sched.apply([ApplyOp(nxt, ApplyAction.RESCHEDULE, item.token)]) == [
        ApplyOutcome.APPLIED
    ]
    fields = sched.payload(esc.dispute_id)
    assert fields is not None
    assert not LONG_NAMES & fields.keys(), fields  # the rewrite holds the short names only
    assert fields["t"] == "senior" and fields["seq"] == "2" and fields["x"] == "CFPB-77"
    decoded = payload_to_escalation(str(esc.dispute_id), fields)
    assert to_ms(decoded.due_at) == to_ms(nxt.due_at)  # the payload keeps milliseconds
    assert decoded.with_changes(due_at=nxt.due_at) == nxt
    score = redis_client.zscore(keys(sched, esc).pending, str(esc.dispute_id))
    assert score is not None and int(score) == to_ms(nxt.due_at)


def test_a_long_name_payload_is_removed_by_apply_and_cancelled_by_seq(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    done, kept = make_esc(-timedelta(minutes=2)), make_esc(timedelta(hours=1))
    sched.enqueue_many([done, kept])
    write_legacy(redis_client, sched, done)
    kept_key = write_legacy(redis_client, sched, kept)
    [item] = sched.claim(10, LEASE_MS, "worker-a").items
    assert item.escalation == done
    final = done.with_changes(seq=2, status=Status.TERMINAL)
    assert sched.apply([ApplyOp(final, ApplyAction.REMOVE, item.token)]) == [
        ApplyOutcome.APPLIED
    ]
    assert sched.payload(done.dispute_id) is None
    assert payload_to_escalation(str(kept.dispute_id), redis_client.hgetall(kept_key)) == kept
    # a worker whose record turned out stale hands the member back at the payload's due_ms
    redis_client.zadd(keys(sched, kept).pending, {str(kept.dispute_id): 0})
    [again] = sched.claim(10, LEASE_MS, "worker-b").items
    assert again.escalation == kept
    assert sched.apply([ApplyOp(kept, ApplyAction.RESCHEDULE, again.token)]) == [
        ApplyOutcome.STALE_SEQ
    ]
    assert set(redis_client.hkeys(kept_key)) >= {"tier", "materiality"}  # not rewritten
    score = redis_client.zscore(keys(sched, kept).pending, str(kept.dispute_id))
    assert score is not None and int(score) == to_ms(kept.due_at)
    assert sched.cancel(kept.dispute_id) is True
    assert redis_client.exists(kept_key) == 0
    assert redis_client.zscore(keys(sched, kept).pending, str(kept.dispute_id)) is None


def test_an_enqueue_after_a_long_name_payload_was_cancelled_writes_short_names(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    esc = make_esc(timedelta(minutes=30), seq=3)
    sched.enqueue(esc)
    write_legacy(redis_client, sched, esc)
    assert sched.cancel(esc.dispute_id) is True
    sched.enqueue(esc)  # a later enqueue (or restore) writes through escalation_to_payload
    fields = sched.payload(esc.dispute_id)
    assert fields is not None and not LONG_NAMES & fields.keys()
    assert payload_to_escalation(str(esc.dispute_id), fields) == esc


# ----------------------------------------------------------------- restore
def test_restore_creates_missing_payload_and_score(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    esc = make_esc(timedelta(minutes=30), seq=3)
    assert sched.restore([esc]) == [ApplyOutcome.APPLIED]
    assert sched.payload(esc.dispute_id) is not None
    score = redis_client.zscore(keys(sched, esc).pending, str(esc.dispute_id))
    assert score == to_ms(esc.due_at)
    assert sched.restore([esc]) == [ApplyOutcome.STALE_SEQ]


def test_restore_updates_older_payload_and_re_adds_a_lost_score(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    esc = make_esc(timedelta(minutes=30))
    sched.enqueue(esc)
    newer = promoted(esc)
    assert sched.restore([newer]) == [ApplyOutcome.APPLIED]
    fields = sched.payload(esc.dispute_id)
    assert fields is not None and fields["seq"] == "2"
    k = keys(sched, esc)
    redis_client.zrem(k.pending, str(esc.dispute_id))  # drift: payload without a member
    assert sched.restore([newer]) == [ApplyOutcome.APPLIED]
    assert redis_client.zscore(k.pending, str(esc.dispute_id)) == to_ms(newer.due_at)


def test_restore_never_touches_a_locked_member(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    esc = make_esc(-timedelta(minutes=1))
    sched.enqueue(esc)
    sched.claim(10, LEASE_MS, "worker-a")
    before = sched.payload(esc.dispute_id)
    assert sched.restore([promoted(esc)]) == [ApplyOutcome.NOT_OWNER]
    assert sched.payload(esc.dispute_id) == before
    fresh = make_esc(timedelta(minutes=1))
    assert try_acquire_lock(sched, fresh.dispute_id, 30_000, "x")
    assert sched.restore([fresh]) == [ApplyOutcome.NOT_OWNER]
    assert sched.payload(fresh.dispute_id) is None


def test_restore_of_terminal_escalation_creates_nothing(sched: RedisScheduler) -> None:
    esc = make_esc(timedelta(minutes=1), seq=4).with_changes(status=Status.TERMINAL)
    assert sched.restore([esc]) == [ApplyOutcome.MISSING]
    assert sched.payload(esc.dispute_id) is None


# ----------------------------------------------------------------- shards, stats
def test_two_shards_spread_members_and_claim_drains_both(
    redis_client: redis.Redis, namespace: str
) -> None:
    sched = RedisScheduler(redis_client, namespace=namespace, shards=2)
    escs = [make_esc(-timedelta(seconds=i + 1)) for i in range(40)]
    assert sched.enqueue_many(escs) == [True] * 40
    sizes = [redis_client.zcard(Keys(namespace, s).pending) for s in (0, 1)]
    assert sum(sizes) == 40 and min(sizes) > 0
    for esc in escs:
        k = sched.keys_for(esc.dispute_id)
        assert redis_client.exists(k.payload(esc.dispute_id)) == 1
    result = sched.claim(40, LEASE_MS, "worker-a")
    assert len(result.items) == 40
    ops = [
        ApplyOp(i.escalation.with_changes(seq=2), ApplyAction.REMOVE, i.token) for i in result.items
    ]
    assert sched.apply(ops) == [ApplyOutcome.APPLIED] * 40
    assert sched.stats()["pending"] == 0
    members = [m for s in (0, 1) for m in sched.pending_members(s)]
    assert members == []


def test_stats_report_pending_due_locked_and_counters(sched: RedisScheduler) -> None:
    due = [make_esc(-timedelta(minutes=m)) for m in (1, 2, 3)]
    sched.enqueue_many([*due, make_esc(timedelta(hours=1))])
    sched.claim(1, LEASE_MS, "worker-a")
    stats = sched.stats()
    assert stats["pending"] == 4
    assert stats["due_now"] == 2
    assert stats["locked"] == 1
    assert stats["dead"] == 0
    assert stats["claimed"] == 1
    assert stats["enqueued"] == 4
    overdue = stats["oldest_overdue_ms"]
    assert overdue is not None and overdue >= 2 * 60_000


def test_pending_members_lists_id_and_score(sched: RedisScheduler) -> None:
    esc = make_esc(timedelta(minutes=3))
    sched.enqueue(esc)
    shard = sched.keys_for(esc.dispute_id).shard
    assert list(sched.pending_members(shard)) == [(str(esc.dispute_id), to_ms(esc.due_at))]


@pytest.mark.parametrize("shards", [1, 16])
def test_wait_for_wake_on_many_shards_ends_at_the_first_marker_of_any_shard(
    redis_client: redis.Redis, namespace: str, shards: int
) -> None:
    """The idle wait names every shard's wake key; on a Redis Cluster each shard is its own
    slot, so the wait must not be one multi-key BLPOP (CROSSSLOT)."""
    sched = RedisScheduler(redis_client, namespace=namespace, shards=shards)
    began = time.monotonic()
    assert sched.wait_for_wake(0.6) is False  # no marker: the whole wait, then False
    assert 0.5 <= time.monotonic() - began < 2.0
    for shard in sorted({0, shards - 1}):
        wake = Keys(namespace, shard).wake
        with ThreadPoolExecutor(max_workers=1) as pool:
            began = time.monotonic()
            waiting = pool.submit(sched.wait_for_wake, 10.0)
            time.sleep(0.3)
            redis_client.lpush(wake, "1")
            assert waiting.result(timeout=15) is True
            assert time.monotonic() - began < 5.0, "woken long before the 10 s timeout"
        assert redis_client.llen(wake) == 0
    assert sched.wait_for_wake(0.3) is False  # no marker left behind; connections reusable


def test_owner_reschedule_at_same_seq_hands_the_claim_back(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    esc = make_esc(-timedelta(minutes=1))
    sched.enqueue(esc)
    item = sched.claim(10, LEASE_MS, "worker-a").items[0]
    op = ApplyOp(esc, ApplyAction.RESCHEDULE, item.token)
    assert sched.apply([op]) == [ApplyOutcome.STALE_SEQ]
    k = keys(sched, esc)
    assert redis_client.zscore(k.pending, str(esc.dispute_id)) == to_ms(esc.due_at)
    assert redis_client.exists(k.lock(esc.dispute_id)) == 0
    assert sched.claim(10, LEASE_MS, "worker-b").items[0].token > item.token


def test_concurrent_workers_never_claim_the_same_member_twice(
    redis_url: str, sched: RedisScheduler, namespace: str
) -> None:
    escs = [make_esc(-timedelta(seconds=i + 1)) for i in range(3000)]
    sched.enqueue_many(escs)

    # all four connect first and start claiming together, in batches small enough (25) that
    # the backlog takes many rounds: otherwise the first thread to connect could claim all
    # 3,000 before the last one started (seen once claim.lua got faster)
    start = threading.Barrier(4)

    def drain(worker: str) -> list[uuid.UUID]:
        client = make_redis(redis_url)
        own = RedisScheduler(client, namespace=namespace, shards=sched.shards)
        got: list[uuid.UUID] = []
        # connected before the start (behind Sentinel the first command also asks a sentinel
        # for the primary: a worker still doing that once saw the other three take all 3,000)
        client.ping()
        start.wait(timeout=30)
        for _ in range(1000):
            result = own.claim(25, LEASE_MS, worker)
            got += [i.escalation.dispute_id for i in result.items]
            # a claim whose window the others took meanwhile comes back empty while members
            # are still due (next_due_ms = now: a worker loops again at once); stop only
            # when nothing is due any more
            if not result.items and (result.next_due_ms is None
                                     or result.next_due_ms > to_ms(result.now)):
                break
        client.close()
        return got

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(drain, [f"worker-{n}" for n in range(4)]))
    claimed = [d for r in results for d in r]
    assert len(claimed) == len(set(claimed)) == 3000
    # the claims interleaved (else the check above proves nothing about concurrency). Not
    # "every worker got a share": four Python threads share one GIL, and on a loaded machine
    # one of them was once not scheduled until the other three had drained the backlog
    assert sum(1 for r in results if r) >= 2, "the claims interleaved"


def test_corrupt_payload_is_logged_and_does_not_cost_the_batch(
    sched: RedisScheduler, redis_client: redis.Redis
) -> None:
    bad, good = make_esc(-timedelta(minutes=2)), make_esc(-timedelta(minutes=1))
    sched.enqueue_many([bad, good])
    redis_client.hset(keys(sched, bad).payload(bad.dispute_id), "m", "lots")
    with capture_logs() as logs:
        result = sched.claim(10, LEASE_MS, "worker-a")
    assert [i.escalation.dispute_id for i in result.items] == [good.dispute_id]
    assert [e["event"] for e in logs] == ["escalation.payload_corrupt"]
    assert logs[0]["dispute_id"] == str(bad.dispute_id)


def test_a_signal_during_the_wake_wait_leaves_no_pending_reply_on_the_connection(
    redis_client: redis.Redis, namespace: str, topology_shards: int
) -> None:
    """SIGTERM in a sleeping worker raises out of the BLPOP read; the connection goes back to
    the pool and is handed out first. Its late BLPOP reply must not become the reply of the
    next command (the worker's lease release read nil and crashed at shutdown). redis-py
    drops a one-server connection on such an error itself, a Sentinel-managed one does not:
    run with ``--redis-topology sentinel`` to see it."""
    import signal

    class Interrupted(Exception):
        pass

    def raise_interrupted(signum: int, frame: object) -> None:
        raise Interrupted

    sched = RedisScheduler(redis_client, namespace=namespace, shards=topology_shards)
    old = signal.signal(signal.SIGALRM, raise_interrupted)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(Interrupted):
            sched.wait_for_wake(1.5)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    key = Keys(namespace, 0).stats
    assert redis_client.hset(key, "probe", "7") == 1
    assert redis_client.hget(key, "probe") == "7"
