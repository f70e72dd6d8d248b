"""Priority under backlog (docs/sla.md) on real Redis: a 3,000-member backlog of mixed
materiality drained through the ready ZSET claim (claim.lua) -- the smaller sibling of
``tests/benchmarks/priority_backlog.py``.

Weights come from the reg_e_error_resolution ladder's bands through the scheduler's priority
hook at enqueue (below every band 0, "high" 1, "very_high" 2); due times are spread over the
last 10 minutes and aging is 60 s per weight, so the bound (W - w) * aging (0 / 60 / 120 s)
is smaller than the spread and both the priority and the aging are exercised. Only order is
asserted, never timings.
"""

from __future__ import annotations

import bisect
import hashlib
import random
import statistics
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import redis

from escalation.adapters.ladder_files import LadderCatalog
from escalation.adapters.redis_scheduler import RedisScheduler
from escalation.domain.escalation import Escalation, NewEscalation
from escalation.domain.sla_timing import band_weight
from escalation.domain.timeutil import to_ms
from escalation.service_layer.priority import weight_fn

N = 3_000
AGING_MS = 60_000
SPREAD_MS = 600_000
AMOUNTS = ("120.00", "3000.00", "15000.00")  # weights 0, 1, 2 on reg_e_error_resolution
LADDERS = Path(__file__).resolve().parents[2] / "ladders"


def _drain(client: redis.Redis, namespace: str) -> tuple[dict[str, int], dict[str, int],
                                                         list[str]]:
    """Enqueue N due escalations, claim batches of 50 until empty, remove each claimed member
    as apply 'remove' would. Returns (weight by member, due ms by member, claim order)."""
    ladders = LadderCatalog.from_dir(LADDERS)
    ladder = ladders.latest("reg_e_error_resolution")
    sched = RedisScheduler(client, namespace=namespace)
    sched.aging_ms = AGING_MS
    sched.priority = weight_fn(ladders)
    rng = random.Random(11)
    now = sched.time()
    escs, weight, due = [], {}, {}
    for _ in range(N):
        amount = rng.choices(AMOUNTS, weights=[70, 20, 10])[0]
        did = uuid.uuid4()
        at = now - timedelta(milliseconds=rng.randrange(0, SPREAD_MS))
        escs.append(Escalation.new(NewEscalation(
            dispute_id=did,
            tier=ladder.tiers[0].id,
            due_at=at,
            materiality=amount,
            source_hash=hashlib.sha256(did.bytes).hexdigest(),
            entered_tier_at=at - timedelta(days=1),
            trace_id=did.hex),
            ladder))
        weight[str(did)] = band_weight(ladder, Decimal(amount))
        due[str(did)] = to_ms(escs[-1].due_at)
    sched.enqueue_many(escs)
    order: list[str] = []
    while True:
        got = sched.claim(50, 600_000, "w")
        if not got.items:
            break
        pipe = client.pipeline(transaction=False)
        for item in got.items:
            m = str(item.escalation.dispute_id)
            order.append(m)
            keys = sched.keys_for(m)
            pipe.zrem(keys.pending, m).delete(keys.payload(m), keys.lock(m)).hdel(keys.prio, m)
        pipe.execute()
    return weight, due, order


def test_backlog_higher_bands_fire_first_and_no_member_is_overtaken_beyond_its_bound(
    redis_client: redis.Redis, namespace: str
) -> None:
    weight, due, order = _drain(redis_client, namespace)
    assert sorted(order) == sorted(due)  # every member claimed exactly once
    assert set(weight.values()) == {0, 1, 2}  # the hook wrote the ladder's band weights
    pos = {m: i for i, m in enumerate(order)}
    top = max(weight.values())

    # 1. the bound, for every member: whatever was claimed before m is due at most
    #    (W - w_m) * aging after m ...
    latest = -(2**62)
    for m in order:
        assert latest - due[m] <= (top - weight[m]) * AGING_MS, m
        latest = max(latest, due[m])
    # ... so m's position is below the FIFO position of the last member due within its bound
    dues = sorted(due.values())
    for m, p in pos.items():
        assert p < bisect.bisect_right(dues, due[m] + (top - weight[m]) * AGING_MS)

    # 2. materiality first: median claim position very_high < high < below bands
    med = {w: statistics.median(pos[m] for m in pos if weight[m] == w) for w in (0, 1, 2)}
    assert med[2] < med[1] < med[0]

    # 3. aging is real: an old low member is claimed before the last very_high member (the
    #    bound is smaller than the spread); within equal weights the order is due order
    last_high = max(pos[m] for m in pos if weight[m] == 2)
    assert any(pos[m] < last_high for m in pos if weight[m] == 0)
    for w in (0, 1, 2):
        same = [m for m in order if weight[m] == w]
        assert [due[m] for m in same] == sorted(due[m] for m in same)
