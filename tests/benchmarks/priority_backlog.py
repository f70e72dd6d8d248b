"""Materiality priority under backlog (docs/sla.md) through the ready ZSET, on real Redis.

20,000 escalations of mixed materiality (the reg_e_error_resolution ladder's bands: below every
band = weight 0, "high" >= 2500 = 1, "very_high" >= 10000 = 2) are all due, their due times
spread over the last 10 minutes, and drained with the real claim (``RedisScheduler.claim`` ->
claim.lua: promote up to 1,000 due pending -> ready, claim the lowest ready scores
``due - weight * aging``) in batches of 50. Each claimed member is removed as an apply
``remove`` would (ZREM, DEL payload/lock, HDEL prio).

Simulated time: the workers fire ``--rate`` escalations per second, so batch ``k`` (0-based) is
claimed at ``t0 + k * batch / rate`` where ``t0`` = Redis TIME when the drain starts (every
member is due by then and nothing new arrives, so the claim order does not depend on the real
speed of this machine). wait = simulated claim time - due.

Stated bound (docs/sla.md "Starvation bound"): an escalation of weight ``w`` is overtaken only
by escalations due less than ``(W - w) * aging`` after it (W = highest weight). Checked for
every member: max due among members claimed before it - its due <= (W - w) * aging.

Usage: python tests/benchmarks/priority_backlog.py [--n 20000] [--batch 50] [--rate 1000]
       [--aging-s 60] [--spread-s 600] [--seed=42]
Redis: $ESCALATION_TEST_REDIS_URL (default redis://127.0.0.1:6379/9); a fresh namespace
``bench-prio-<hex>``; its keys are UNLINKed at the end (never FLUSHDB). Exit status 1 on FAIL.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
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

LADDER = "reg_e_error_resolution"
AMOUNTS = {"below bands": "120.00", "high (>=2500)": "3000.00",
           "very_high (>=10000)": "15000.00"}
MIX = [70, 20, 10]


@dataclass
class Drained:
    """Result of one drain: per member its band, weight, due (ms), claim position."""

    band: dict[str, str]
    weight: dict[str, int]
    due: dict[str, int]
    order: list[str]
    t0_ms: int
    claims: int
    wall_s: float


def unlink_namespace(client: redis.Redis, ns: str) -> int:
    """UNLINK every key of namespace ``ns`` (hash tag ``{ns:<shard>}``). Returns the count."""
    keys = list(client.scan_iter(match=f"*{{{ns}:*", count=1000))
    for i in range(0, len(keys), 500):
        client.unlink(*keys[i:i + 500])
    return len(keys)


def run(client: redis.Redis, ns: str, *, n: int, batch: int, aging_ms: int, spread_ms: int,
        seed: int) -> Drained:
    """Enqueue ``n`` due escalations and drain them through ``claim``; see the module doc."""
    sched = RedisScheduler(client, namespace=ns)
    sched.aging_ms = aging_ms
    ladders = LadderCatalog.from_dir(Path(__file__).resolve().parents[1] / "ladders")
    ladder = ladders.latest(LADDER)
    sched.priority = weight_fn(ladders)
    rng = random.Random(seed)
    now = sched.time()
    out = Drained({}, {}, {}, [], 0, 0, 0.0)
    escs = []
    for _ in range(n):
        band = rng.choices(list(AMOUNTS), weights=MIX)[0]
        did = uuid.uuid4()
        due = now - timedelta(milliseconds=rng.randrange(0, spread_ms))
        escs.append(Escalation.new(NewEscalation(
            dispute_id=did,
            tier=ladder.tiers[0].id,
            due_at=due,
            materiality=AMOUNTS[band],
            source_hash=hashlib.sha256(did.bytes).hexdigest(),
            entered_tier_at=due - timedelta(days=1),
            trace_id=did.hex),
            ladder))
        out.band[str(did)] = band
        out.weight[str(did)] = band_weight(ladder, Decimal(AMOUNTS[band]))
        out.due[str(did)] = to_ms(escs[-1].due_at)
    sched.enqueue_many(escs)
    out.t0_ms = to_ms(sched.time())
    started = time.perf_counter()
    while True:
        res = sched.claim(batch, 600_000, "bench")
        if not res.items:
            break
        out.claims += 1
        pipe = client.pipeline(transaction=False)
        for item in res.items:  # what apply "remove" does
            m = str(item.escalation.dispute_id)
            out.order.append(m)
            keys = sched.keys_for(m)
            pipe.zrem(keys.pending, m).delete(keys.payload(m), keys.lock(m)).hdel(keys.prio, m)
        pipe.execute()
    out.wall_s = time.perf_counter() - started
    return out


def violations(d: Drained, aging_ms: int) -> dict[str, int]:
    """Members overtaken beyond the bound, per band: some member claimed before ``m`` is due
    more than ``(W - w_m) * aging_ms`` after ``m``."""
    top = max(d.weight.values())
    bad = dict.fromkeys(AMOUNTS, 0)
    latest_before = -(2**62)
    for m in d.order:
        if latest_before - d.due[m] > (top - d.weight[m]) * aging_ms:
            bad[d.band[m]] += 1
        latest_before = max(latest_before, d.due[m])
    return bad


def _q(values: list[float]) -> tuple[float, float, float]:
    values = sorted(values)
    return (statistics.median(values), values[min(len(values) - 1, int(0.95 * len(values)))],
            values[-1])


def report(d: Drained, *, batch: int, rate: float, aging_ms: int, spread_ms: int) -> bool:
    """Print the per-band table; returns True when no member was overtaken beyond the bound."""
    pos = {m: i for i, m in enumerate(d.order)}
    fifo = {m: i for i, m in enumerate(sorted(d.due, key=lambda m: (d.due[m], m)))}
    top = max(d.weight.values())
    bad = violations(d, aging_ms)

    def wait_s(m: str, p: int) -> float:
        return (d.t0_ms + (p // batch) * batch / rate * 1000 - d.due[m]) / 1000

    print(f"{len(d.due)} due escalations (due spread over the last {spread_ms / 1000:.0f} s), "
          f"ladder {LADDER}, batch {batch}, aging {aging_ms / 1000:.0f} s per weight, "
          f"simulated rate {rate:.0f}/s; claimed {len(d.order)} in {d.claims} claims "
          f"({d.wall_s:.1f} s wall on this machine)")
    print(f"{'band':20} {'w':>2} {'n':>6} {'pos p50':>8} {'p95':>6} {'max':>6} "
          f"{'wait s p50':>10} {'p95':>6} {'max':>6} {'FIFO p50':>8} {'vs FIFO s p50':>13} "
          f"{'max':>6} {'bound s':>7} {'over':>5}")
    for band in AMOUNTS:
        members = [m for m in d.order if d.band[m] == band]
        if not members:
            continue
        w = d.weight[members[0]]
        p = _q([float(pos[m]) for m in members])
        ws = _q([wait_s(m, pos[m]) for m in members])
        f50 = statistics.median(wait_s(m, fifo[m]) for m in members)
        extra = sorted(wait_s(m, pos[m]) - wait_s(m, fifo[m]) for m in members)
        print(f"{band:20} {w:2d} {len(members):6d} {p[0]:8.0f} {p[1]:6.0f} {p[2]:6.0f} "
              f"{ws[0]:10.1f} {ws[1]:6.1f} {ws[2]:6.1f} {f50:8.1f} "
              f"{statistics.median(extra):13.1f} {extra[-1]:6.1f} "
              f"{(top - w) * aging_ms / 1000:7.0f} {bad[band]:5d}")
    ok = len(d.order) == len(d.due) and not any(bad.values())
    print("vs FIFO = simulated wait minus the wait a plain due-order claim would give it; "
          "bound s = (W - w) * aging")
    print("bound: an escalation of weight w is overtaken only by escalations due <= (W - w) * "
          f"aging after it (W = {top}); 'over' = members overtaken beyond it -> "
          f"{'PASS' if ok else 'FAIL'}")
    return ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--rate", type=float, default=1000.0, help="fired per second (simulated)")
    ap.add_argument("--aging-s", type=int, default=60)
    ap.add_argument("--spread-s", type=int, default=600)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    url = os.environ.get("ESCALATION_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
    client = redis.Redis.from_url(url, decode_responses=True)
    ns = f"bench-prio-{uuid.uuid4().hex[:8]}"
    try:
        drained = run(client, ns, n=args.n, batch=args.batch, aging_ms=args.aging_s * 1000,
                      spread_ms=args.spread_s * 1000, seed=args.seed)
    finally:
        unlink_namespace(client, ns)
    ok = report(drained, batch=args.batch, rate=args.rate, aging_ms=args.aging_s * 1000,
                spread_ms=args.spread_s * 1000)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
