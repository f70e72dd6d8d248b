"""Materiality priority under backlog (issue 4 point 5): drain 20,000 due escalations of mixed
materiality through the real claim (RedisScheduler.claim with the priority hook, real Redis)
and print the claim-order position and the simulated wait per materiality band.

Usage: python benchmarks/priority_backlog.py [--n 20000] [--batch 50] [--rate 1000]
Redis: $ESCALATION_TEST_REDIS_URL (default redis://127.0.0.1:6379/9); a fresh namespace is
used and its keys are deleted at the end. Simulated wait = position / rate (escalations per
second the workers fire); the figures are order statistics, not timings of this machine.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import os
import random
import statistics
import uuid
from datetime import timedelta
from pathlib import Path

import redis

from escalation.adapters.ladder_files import LadderCatalog
from escalation.adapters.redis_scheduler import RedisScheduler
from escalation.domain.escalation import Escalation
from escalation.domain.sla_timing import band_weight
from escalation.service_layer.priority import weight_fn

AMOUNTS = {"below bands": "120.00", "high (>=2500)": "3000.00", "very_high (>=10000)": "15000.00"}
MIX = [70, 20, 10]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--rate", type=float, default=1000.0, help="fired per second (simulated)")
    args = ap.parse_args()
    url = os.environ.get("ESCALATION_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
    client = redis.Redis.from_url(url, decode_responses=True)
    ns = f"bench-prio-{uuid.uuid4().hex[:8]}"
    sched = RedisScheduler(client, namespace=ns)
    ladders = LadderCatalog.from_dir(Path(__file__).resolve().parents[1] / "ladders")
    ladder = ladders.latest("reg_e_error_resolution")
    sched.priority = weight_fn(ladders)
    rng = random.Random(42)
    now = sched.time()
    band_of: dict[str, str] = {}
    due_of: dict[str, int] = {}
    escs = []
    for _ in range(args.n):
        band = rng.choices(list(AMOUNTS), weights=MIX)[0]
        did = uuid.uuid4()
        due = now - timedelta(milliseconds=rng.randrange(0, 20 * 60_000))
        escs.append(Escalation.new(
            dispute_id=did, tier=ladder.tiers[0].id, due_at=due, materiality=AMOUNTS[band],
            source_hash=hashlib.sha256(did.bytes).hexdigest(), ladder=ladder,
            entered_tier_at=due - timedelta(days=1), trace_id=did.hex))
        band_of[str(did)] = band
        due_of[str(did)] = int(due.timestamp() * 1000)
    sched.enqueue_many(escs)
    position: dict[str, int] = {}
    try:
        while len(position) < args.n:
            res = sched.claim(args.batch, 60_000, "bench")
            if not res.items:
                break
            pipe = client.pipeline(transaction=False)
            for item in res.items:
                m = str(item.escalation.dispute_id)
                position[m] = len(position)
                keys = sched.keys_for(m)
                pipe.zrem(keys.pending, m).delete(keys.payload(m), keys.lock(m))
            pipe.execute()
    finally:
        k = sched.keys_for("x")
        client.delete(k.pending, k.fence, k.stats, k.wake)
        for m in band_of:
            if m not in position:
                client.delete(k.payload(m), k.lock(m))
    weights = {b: band_weight(ladder, __import__("decimal").Decimal(a)) for b, a in AMOUNTS.items()}
    top = max(weights.values())
    dues = sorted(due_of.values())
    print(f"{args.n} due escalations, batch {args.batch}, window 4 x batch, aging "
          f"{sched.aging_ms} ms, simulated rate {args.rate:.0f}/s; claimed {len(position)}")
    print(f"{'band':22} {'n':>6} {'p50 pos':>8} {'p95 pos':>8} {'max pos':>8} "
          f"{'p50 wait s':>10} {'p95 wait s':>10} {'max wait s':>10} {'bound ok':>8}")
    for band in AMOUNTS:
        members = [m for m, b in band_of.items() if b == band and m in position]
        pos = sorted(position[m] for m in members)
        ok = all(position[m] < bisect.bisect_right(
            dues, due_of[m] + (top - weights[band]) * sched.aging_ms) for m in members)
        q = statistics.quantiles(pos, n=20)
        print(f"{band:22} {len(pos):6d} {statistics.median(pos):8.0f} {q[18]:8.0f} "
              f"{pos[-1]:8d} {statistics.median(pos) / args.rate:10.1f} "
              f"{q[18] / args.rate:10.1f} {pos[-1] / args.rate:10.1f} {ok!s:>8}")
    fifo = sorted(position, key=lambda m: due_of[m])
    print("FIFO reference: p50 position", len(fifo) // 2, "max", len(fifo) - 1)


if __name__ == "__main__":
    main()
