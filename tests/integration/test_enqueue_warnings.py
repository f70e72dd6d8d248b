"""Pre-breach warnings scheduled by the enqueue call (``RedisScheduler.enqueue_encoded(items,
warnings)``, enqueue.lua's warnings table; what the CSV import's bulk path passes).

The script adds the warnings of the items it newly schedules, and only of those: an item
whose payload already existed adds nothing, a re-sent call adds nothing; ZADD NX keeps an
existing member's score; the wake marker is pushed when a new warning became the earliest,
as ``RedisWarnings.schedule`` does; the members are the ones ``RedisWarnings.schedule_members``
would add for the same rows. A malformed warnings argument writes nothing at all.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, cast

import pytest
import redis

from escalation.adapters.redis_keys import Keys
from escalation.adapters.redis_scheduler import EncodedPayload, RedisScheduler, script_source
from escalation.adapters.redis_warnings import RedisWarnings
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation
from escalation.domain.materiality import Materiality

WARN_A = ((":1:0.5", 1_900_000_000_000), (":1:0.75", 1_900_000_100_000))
WARN_B = ((":1:0.9", 1_900_000_200_000),)


def proto(due_in: timedelta = timedelta(days=3)) -> Escalation:
    base = datetime.now(UTC).replace(microsecond=0)
    return Escalation(
        dispute_id=uuid.uuid4(), tier="standard", due_at=base + due_in,
        materiality=Materiality(Decimal("10.00")), source_hash="a1", ladder="default",
        ladder_version=1, seq=1, entered_tier_at=base - timedelta(hours=1),
        trace_id=uuid.uuid4().hex)


@pytest.fixture()
def sched(redis_client: redis.Redis, namespace: str, topology_shards: int) -> RedisScheduler:
    return RedisScheduler(redis_client, namespace=namespace, shards=topology_shards)


def rows(sched: RedisScheduler, n: int, due_in: timedelta = timedelta(days=3)
         ) -> list[EncodedPayload]:
    """``n`` rendered enqueues of one shape (fresh dispute ids)."""
    template = sched.payload_template(proto(due_in))
    template.prepare()
    return [template.render(str(uuid.uuid4()), None, "a1", uuid.uuid4().hex) for _ in range(n)]


def all_warnings(client: redis.Redis, sched: RedisScheduler) -> dict[str, int]:
    out: dict[str, int] = {}
    for keys in sched.shard_keys():
        got = cast(list[tuple[str, float]], client.zrange(keys.warnings, 0, -1, withscores=True))
        out.update((str(member), int(score)) for member, score in got)
    return out


def test_only_newly_scheduled_items_add_their_warnings(
    redis_client: redis.Redis, sched: RedisScheduler
) -> None:
    a, b, c, d = rows(sched, 4)
    assert sched.enqueue_encoded([b]) == [True]  # b exists before the call
    flags = sched.enqueue_encoded([a, b, c, d], [WARN_A, WARN_A, None, WARN_B])
    assert flags == [True, False, True, True]
    expected = {a[2][0] + s: ms for s, ms in WARN_A} | {d[2][0] + s: ms for s, ms in WARN_B}
    assert all_warnings(redis_client, sched) == expected
    # re-sent: nothing new, nothing moved
    assert sched.enqueue_encoded([a, b, c, d], [WARN_A, WARN_A, None, WARN_B]) == [False] * 4
    assert all_warnings(redis_client, sched) == expected


def test_the_same_members_as_the_warnings_queue(
    redis_client: redis.Redis, sched: RedisScheduler, namespace: str, topology_shards: int
) -> None:
    batch = rows(sched, 40)
    points = [WARN_A if i % 3 else WARN_B for i in range(40)]
    sched.enqueue_encoded(batch, points)
    folded = all_warnings(redis_client, sched)
    other = RedisScheduler(redis_client, namespace=namespace + "q", shards=topology_shards)
    try:
        RedisWarnings(redis_client, other.namespace, other.shards).schedule_members(
            [(r[2][0] + s, ms) for r, w in zip(batch, points, strict=True) for s, ms in w])
        assert all_warnings(redis_client, other) == folded
        assert len(folded) == sum(len(w) for w in points)
    finally:
        for keys in other.shard_keys():
            redis_client.delete(keys.warnings, keys.wake)


def test_an_existing_member_keeps_its_score(
    redis_client: redis.Redis, sched: RedisScheduler
) -> None:
    (a,) = rows(sched, 1)
    member = a[2][0] + WARN_A[0][0]
    redis_client.zadd(sched.keys_for(a[2][0]).warnings, {member: 5})
    assert sched.enqueue_encoded([a], [WARN_A]) == [True]
    assert all_warnings(redis_client, sched)[member] == 5


def test_wake_marker_when_a_new_warning_is_the_earliest(
    redis_client: redis.Redis, namespace: str
) -> None:
    one = RedisScheduler(redis_client, namespace=namespace, shards=1)
    keys = Keys(namespace, 0)
    assert one.enqueue_encoded(rows(one, 1, timedelta(days=3))) == [True]
    redis_client.zadd(keys.warnings, {"x:1:0.5": 1_800_000_000_000})  # earlier than WARN_B
    redis_client.delete(keys.wake)
    # a later due time and a later warning: nobody needs waking
    assert one.enqueue_encoded(rows(one, 1, timedelta(days=9)), [WARN_B]) == [True]
    assert redis_client.llen(keys.wake) == 0
    assert len(all_warnings(redis_client, one)) == 2
    # a warning earlier than everything in the ZSET wakes the workers
    assert one.enqueue_encoded(rows(one, 1, timedelta(days=9)),
                               [((":1:0.1", 1_000_000_000_000),)]) == [True]
    assert redis_client.lrange(keys.wake, 0, -1) == ["1"]


@pytest.mark.parametrize(("warnings", "message"), [
    ([WARN_A], "entries"),  # one entry for two items
    ([tuple((f":1:0.{i}", 1) for i in range(17)), None], "at most 16"),
    ([((("1:0.5", 1)),), None], "start with ':'"),
])
def test_bad_warnings_raise_before_anything_is_written(
    redis_client: redis.Redis, sched: RedisScheduler, warnings: list[Any], message: str
) -> None:
    batch = rows(sched, 2)
    with pytest.raises(InvalidInput, match=message):
        sched.enqueue_encoded(batch, warnings)
    assert all_warnings(redis_client, sched) == {}
    for r in batch:
        assert redis_client.exists(r[1]) == 0


@pytest.mark.parametrize(("table", "refs"), [
    ("not json", "[1]"),
    ('[["a"]]', "[1]"),  # odd list
    ('[["", "1"]]', "[1]"),  # empty suffix
    ('[["1:0.5", "soon"]]', "[1]"),  # ms not an integer
    ('[["1:0.5", 1]]', "[1]"),  # ms not a string
    ('[["1:0.5", "1"]]', "[2]"),  # reference out of the table
    ('[["1:0.5", "1"]]', "[1, 1]"),  # one reference per item
    ('[["1:0.5", "1"]]', "[1.5]"),
    ("", "[1]"),  # references without a table
])
def test_enqueue_script_refuses_bad_warnings_and_writes_nothing(
    redis_client: redis.Redis, namespace: str, table: str, refs: str
) -> None:
    k = Keys(namespace, 0)
    script = redis_client.register_script(script_source("enqueue"))
    did = str(uuid.uuid4())
    with pytest.raises(redis.ResponseError, match="EINVAL enqueue"):
        script(keys=[k.pending, k.wake, k.stats, k.warnings, k.payload(did)],
               args=[table, refs, did, "1000", "1", "t", "standard"])
    assert redis_client.exists(k.pending, k.payload(did), k.warnings, k.wake, k.stats) == 0
