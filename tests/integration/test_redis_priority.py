"""The ready set (ADR 0006) on real Redis: materiality priority through the ready ZSET (claim.lua).

2,000 escalations due at once (due times spread over the last 20 minutes), weight 0 or 3
(the prio HASH, as enqueue writes it), aging 60 s so the
bound (3 * 60 s) is smaller than the spread. Claimed in batches of 50 until empty:

* every high member is claimed before any low member whose due time is not more than the
  bound earlier (``due_low > due_high - (3 - 0) * aging``);
* no member is overtaken by a member due more than its bound after it.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import redis

from escalation.adapters.redis_scheduler import RedisScheduler
from tests.integration.test_redis_scheduler import LEASE_MS, make_esc

AGING_MS = 60_000
W_MAX = 3


def test_high_band_claimed_first_within_the_bound_and_no_member_waits_past_it(
    redis_client: redis.Redis, namespace: str
) -> None:
    sched = RedisScheduler(redis_client, namespace=namespace)
    sched.aging_ms = AGING_MS
    rng = random.Random(4)
    escs = [make_esc(-timedelta(milliseconds=rng.randrange(1_000, 1_200_000)))
            for _ in range(2_000)]
    high = {e.dispute_id for e in escs if rng.random() < 0.2}
    weights: dict[Any, int] = {e.dispute_id: (W_MAX if e.dispute_id in high else 0)
                               for e in escs}
    sched.enqueue_many(escs)  # no weight function: weights written to the prio HASH directly
    keys = sched.shard_keys()[0]
    redis_client.hset(keys.prio, mapping={str(d): str(W_MAX) for d in high})
    order: list[Any] = []
    while True:
        got = sched.claim(50, LEASE_MS, "w")
        if not got.items:
            break
        order += [i.escalation.dispute_id for i in got.items]
    assert len(order) == len(set(order)) == 2_000
    pos = {d: i for i, d in enumerate(order)}
    due = {e.dispute_id: int(e.due_at.timestamp() * 1000) for e in escs}
    lows = [d for d in due if d not in high]
    bound = W_MAX * AGING_MS
    # 1. high before every low whose due is not more than the bound earlier
    for h in high:
        for lo in lows:
            if due[lo] > due[h] - bound:
                assert pos[h] < pos[lo]
    # 2. nobody is overtaken by a member due more than (W - w) * aging after it
    for a, due_a in due.items():
        slack = (W_MAX - weights[a]) * AGING_MS
        for b, due_b in due.items():
            if pos[b] < pos[a]:
                assert due_b - due_a <= slack
    # 3. and the effect is real: the median high position is far ahead of the median low
    highs = sorted(pos[d] for d in high)
    lows_pos = sorted(pos[d] for d in lows)
    assert highs[len(highs) // 2] < lows_pos[len(lows_pos) // 2]
