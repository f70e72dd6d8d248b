"""Scenario ``enqueue``: escalations enqueued per second from one client.

Four figures, each on a fresh namespace, escalations due a day ahead (nothing fires):

* ``single``: ``enqueue_on_breach`` one request at a time (PostgreSQL record + Redis);
* ``batched``: ``enqueue_many`` in chunks of ``batch`` (one transaction + one script call
  per chunk);
* ``redis_single`` / ``redis_batched``: ``RedisScheduler.enqueue`` / ``enqueue_many`` of
  pre-built escalations (no PostgreSQL): the Redis side alone.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from datetime import timedelta
from typing import Any

from escalation.bench.common import Target, load, new_namespace
from escalation.bootstrap import App, core_ports_for
from escalation.domain.escalation import Escalation
from escalation.service_layer.enqueue import (
    EnqueueMany,
    EnqueueOne,
    EnqueueRequest,
    build_escalation,
    enqueue_many,
    enqueue_on_breach,
)


def _requests(app: App, n: int) -> list[EnqueueRequest]:
    due = app.scheduler.time() + timedelta(days=1)
    out = []
    for i in range(n):
        did = uuid.uuid4()
        out.append(EnqueueRequest(dispute_id=did, materiality=f"{i % 5000}.25",
                                  source_hash=hashlib.sha256(did.bytes).hexdigest(),
                                  due_at=due + timedelta(milliseconds=i)))
    return out


def _escalations(app: App, n: int) -> list[Escalation]:
    ladder = app.ladders.latest(app.settings.default_ladder)
    now = app.scheduler.time()
    return [build_escalation(r, ladder, app.calendars, now) for r in _requests(app, n)]


def run(tgt: Target, n: int = 5000, n_single: int = 1000, batch: int = 500) -> dict[str, Any]:
    """Run the four measurements. Returns ``{<kind>: {"n", "seconds", "per_s"}}`` + load."""
    result: dict[str, Any] = {"scenario": "enqueue", "batch": batch, "load": load()}

    def timed(kind: str, count: int, fn: Any) -> None:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        result[kind] = {"n": count, "seconds": round(dt, 3), "per_s": round(count / dt, 1)}

    app = tgt.app(new_namespace())
    ports, actor, ladder = core_ports_for(app), app.actor, app.settings.default_ladder
    singles = _requests(app, n_single)
    timed("single", n_single, lambda: [enqueue_on_breach(EnqueueOne(r, actor, ladder), ports)
                                       for r in singles])
    reqs = _requests(app, n)
    timed("batched", n, lambda: [enqueue_many(EnqueueMany(reqs[i : i + batch], actor, ladder),
                                              ports)
                                 for i in range(0, n, batch)])
    rapp = tgt.app(new_namespace())
    escs = _escalations(rapp, n_single)
    timed("redis_single", n_single, lambda: [rapp.scheduler.enqueue(e) for e in escs])
    escs = _escalations(rapp, n)
    timed("redis_batched", n, lambda: [rapp.scheduler.enqueue_many(escs[i : i + batch])
                                       for i in range(0, n, batch)])
    for ns in (app.settings.namespace, rapp.settings.namespace):
        tgt.cleanup_namespace(ns)
    return result
