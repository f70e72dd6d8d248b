"""Scenario ``scale``: claim latency and memory per pending escalation at growing backlogs.

Method, per size S (default 10k, 100k, 1M), each on a fresh namespace:

1. ``used_memory`` (INFO memory), then S escalations written with
   ``RedisScheduler.enqueue_many`` in batches of 500 (Redis only: no PostgreSQL, for speed):
   ``S - D`` due a day ahead and ``D = rounds * claim_batch`` already due (the earliest);
   ``used_memory`` again: bytes per pending escalation = delta / S.
2. ``rounds`` claims of ``claim_batch`` members (``RedisScheduler.claim``, client-side wall
   time of the whole call: window read + claim.lua + payload parsing): p50 / mean ms.
3. Baseline: the same S ids as bare ZSET members (same score layout) plus one HASH of 5
   fields (tier, ladder, seq, due_ms, source_hash: these long names, whatever the payload's
   own field names, with the values of the real payload) per member, under a key of the same
   length; measured the same way.

Figures: ``claim_ms`` per size, ``claim_ratio`` = p50 at the largest size / p50 at the
smallest, ``bytes_per_pending``, ``bare_bytes``, ``memory_ratio`` = the two divided.
``used_memory`` is server-wide: other clients' writes during a run add noise (large
sizes drown it).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any

from escalation.bench.common import Target, load, new_namespace, percentile
from escalation.composition_bench import keys as redis_keys
from escalation.composition_bench import long_field_names, payload_fields
from escalation.domain.escalation import Escalation
from escalation.service_layer.enqueue import EnqueueRequest, build_escalation

CHUNK = 500
BARE_FIELDS = ("tier", "ladder", "seq", "due_ms", "source_hash")


def _used_memory(client: Any) -> int:
    """``used_memory`` once the server has finished freeing earlier runs' keys.

    The namespace of a previous step is deleted with UNLINK, which frees in the background:
    reading ``used_memory`` while ``lazyfree_pending_objects`` > 0 would count that freeing
    against the next measurement (seen as a bogus 1.68x at 1M pending).
    """
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        info = client.info("memory")
        if int(info.get("lazyfree_pending_objects", 0)) == 0:
            return int(info["used_memory"])
        time.sleep(0.1)
    return int(client.info("memory")["used_memory"])


def _template(tgt_app: Any) -> Escalation:
    ladder = tgt_app.ladders.latest(tgt_app.settings.default_ladder)
    now = tgt_app.scheduler.time()
    did = uuid.uuid4()
    return build_escalation(
        EnqueueRequest(dispute_id=did, materiality="1250.25", source_hash="ab" * 32,
                       due_at=now + timedelta(days=1), trace_id=uuid.uuid4().hex),
        ladder, tgt_app.calendars, now)


def _chunks(template: Escalation, size: int, due_now: int) -> Any:
    """Yield lists of escalations (CHUNK each): ``due_now`` past-due first, then future."""
    past = template.entered_tier_at - timedelta(minutes=1)
    future = template.due_at
    for start in range(0, size, CHUNK):
        chunk = []
        for i in range(start, min(size, start + CHUNK)):
            due = past + timedelta(milliseconds=i) if i < due_now else (
                future + timedelta(milliseconds=i))
            chunk.append(replace(template, dispute_id=uuid.uuid4(), due_at=due,
                                 trace_id=uuid.uuid4().hex))
        yield chunk


def one_size(tgt: Target, size: int, rounds: int, claim_batch: int) -> dict[str, Any]:
    """Memory and claim latency at ``size`` pending, plus the bare baseline."""
    client = tgt.redis()
    app = tgt.app(new_namespace())
    due_now = min(rounds * claim_batch, size // 2)
    template = _template(app)
    try:
        mem0 = _used_memory(client)
        t0 = time.perf_counter()
        ids: list[str] = []
        fields: list[dict[str, str]] = []
        for chunk in _chunks(template, size, due_now):
            app.scheduler.enqueue_many(chunk)
            ids += [str(e.dispute_id) for e in chunk]
            if len(fields) < 1:
                fields.append(payload_fields(chunk[0]))
        load_s = time.perf_counter() - t0
        mem1 = _used_memory(client)
        claims: list[float] = []
        for _ in range(rounds):
            c0 = time.perf_counter()
            got = app.scheduler.claim(claim_batch, 60_000, "bench-scale")
            claims.append((time.perf_counter() - c0) * 1000)
            if not got.items:
                break
        tgt.cleanup_namespace(app.settings.namespace)
        bare = _bare(tgt, client, ids, fields[0])
    finally:
        client.close()
    per = (mem1 - mem0) / size
    return {
        "size": size, "load_s": round(load_s, 1), "bytes_per_pending": round(per, 1),
        "bare_bytes": round(bare, 1), "memory_ratio": round(per / bare, 3) if bare else None,
        "claim_ms_p50": round(percentile(claims, 50) or 0, 3),
        "claim_ms_mean": round(sum(claims) / len(claims), 3) if claims else None,
        "claim_batch": claim_batch, "claims": len(claims),
    }


def _bare(tgt: Target, client: Any, ids: list[str], payload: dict[str, str]) -> float:
    """Bytes per member of a bare ZSET member + 5-field HASH (same ids, same key lengths)."""
    ns = new_namespace()
    tgt.namespaces.append(ns)
    keys = redis_keys(ns, 0)
    # The baseline keeps its long field names (the reference stays the same across payload
    # formats); the values are the real payload's.
    by_long = {long_field_names()[short]: value for short, value in payload.items()}
    values = {f: by_long[f] for f in BARE_FIELDS}
    mem0 = _used_memory(client)
    base = int(payload["due_ms"])
    for start in range(0, len(ids), CHUNK):
        pipe = client.pipeline(transaction=False)
        chunk = ids[start : start + CHUNK]
        pipe.zadd(keys.pending, {m: base + start + i for i, m in enumerate(chunk)})
        for m in chunk:
            pipe.hset(keys.payload(m), mapping=values)
        pipe.execute()
    per = (_used_memory(client) - mem0) / len(ids)
    tgt.cleanup_namespace(ns)
    return per


def run(tgt: Target, sizes: list[int], rounds: int = 20, claim_batch: int = 100) -> dict[str, Any]:
    """Every size in order; ``claim_ratio`` compares the largest with the smallest size."""
    start_load = load()
    rows = [one_size(tgt, s, rounds, claim_batch) for s in sizes]
    first, last = rows[0], rows[-1]
    ratio = (last["claim_ms_p50"] / first["claim_ms_p50"]) if first["claim_ms_p50"] else None
    return {"scenario": "scale", "sizes": rows,
            "claim_ratio": round(ratio, 3) if ratio else None,
            "memory_ratio_max": max((r["memory_ratio"] or 0) for r in rows),
            "load": start_load}
