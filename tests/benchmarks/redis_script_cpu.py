"""Redis server CPU per escalation of claim.lua and of apply.lua (docs/performance.md).

A private redis-server (``escalation.bench.compare.PrivateRedis``); N escalations (default
10,000) enqueued already due, claimed 500 at a time with ``RedisScheduler.claim``, then applied
500 at a time as promotions carrying an 11-field notification. Printed per step: the
redis-server process CPU (INFO ``used_cpu_user + used_cpu_sys`` delta) / N and the inner
command counts (INFO commandstats). No PostgreSQL, no worker process.

Usage: python tests/benchmarks/redis_script_cpu.py [--n 10000]
"""

from __future__ import annotations

import argparse
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import redis

from escalation.adapters.redis_scheduler import RedisScheduler
from escalation.bench.compare import PrivateRedis
from escalation.domain.escalation import Escalation
from escalation.domain.materiality import Materiality
from escalation.ports import ApplyAction, ApplyOp, ClaimedItem


def _cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def _note(item: ClaimedItem) -> dict[str, str]:
    did = str(item.escalation.dispute_id)
    return {"dispute_id": did, "seq": "2", "idempotency_key": f"{did}:2",
            "match_decision": "PROMOTED_TO_SENIOR", "from_tier": "standard",
            "to_tier": "senior", "ladder": "default@2", "trace_id": item.escalation.trace_id,
            "source_hash": "d4e5f6", "materiality": "980.50", "decided_ms": "1767225600000"}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    n = ap.parse_args().n
    srv = PrivateRedis.start()
    try:
        r = redis.Redis.from_url(srv.url, decode_responses=True)
        sched = RedisScheduler(r, namespace="cpu")
        now = datetime.now(UTC).replace(microsecond=0)
        escs = [Escalation(dispute_id=uuid.uuid4(), tier="standard",
                           due_at=now - timedelta(seconds=5),
                           materiality=Materiality(Decimal("980.50")), source_hash="d4e5f6",
                           ladder="default", ladder_version=2, seq=1,
                           entered_tier_at=now - timedelta(days=1), trace_id=f"trace-{i}")
                for i in range(n)]
        for start in range(0, n, 500):
            sched.enqueue_many(escs[start:start + 500])
        r.config_resetstat()
        cpu0 = _cpu(r)
        claimed: list[ClaimedItem] = []
        while items := sched.claim(500, 60_000, "w1").items:
            claimed += items
        claim_stats: dict[str, Any] = r.info("commandstats")
        cpu1 = _cpu(r)
        r.config_resetstat()
        later = now + timedelta(days=1)
        for start in range(0, len(claimed), 500):
            sched.apply([ApplyOp(it.escalation.with_changes(seq=2, tier="senior", due_at=later,
                                                            entered_tier_at=now),
                                 ApplyAction.RESCHEDULE, it.token, _note(it))
                         for it in claimed[start:start + 500]])
        apply_stats: dict[str, Any] = r.info("commandstats")
        cpu2 = _cpu(r)
        for label, stats, cpu in (("claim", claim_stats, cpu1 - cpu0),
                                  ("apply", apply_stats, cpu2 - cpu1)):
            calls = ", ".join(f"{k.removeprefix('cmdstat_')}={v['calls']}"
                              for k, v in sorted(stats.items())
                              if k not in ("cmdstat_evalsha", "cmdstat_info",
                                           "cmdstat_config|resetstat"))
            print(f"redis_script_cpu: {label}: {cpu / n * 1e6:.1f} us/esc redis-server CPU "
                  f"(N={len(claimed)}); {calls}")
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
