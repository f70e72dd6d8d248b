"""Scenario ``precision``: one escalation due ``ahead_s`` ahead, repeated, no backlog.

Method: one idle ``escalation worker`` (poll interval 5 s). Each round enqueues one
escalation (service layer: PostgreSQL + Redis) due at Redis TIME + ``ahead_s``; the enqueue
pushes the wake marker, the worker wakes, reads the earliest due time and sleeps until it
(BLPOP for most of the wait, the last 150 ms locally: see ``RedisScheduler.wait_for_wake``).
Lag = ``applied_ms`` (host clock right after apply) - due; claim lag = Redis TIME at claim
- due. Rounds run one after another; each waits for its own promotion event.

``busy`` (``--busy N``): N CPU-bound processes (``python -c "while True: pass"``, the
machine's normal priority) run beside the worker for the whole measurement and are killed
at its end: the lag a worker shows when the cores are contended.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
import uuid
from typing import Any

from escalation.bench.common import (
    Target,
    WorkerProc,
    load,
    new_namespace,
    percentile,
    wait_started,
)
from escalation.bootstrap import core_ports_for
from escalation.domain.timeutil import from_ms
from escalation.service_layer.enqueue import EnqueueOne, EnqueueRequest, enqueue_on_breach

POLL_INTERVAL_S = 5


def run(tgt: Target, rounds: int = 20, ahead_s: float = 2.0, busy: int = 0) -> dict[str, Any]:
    """Run ``rounds`` rounds (``busy`` busy-loop processes beside the worker). Returns lag_ms /
    claim_lag_ms {p50, p99, max}, lags (list), busy, load.

    A round whose lag exceeds the worker's poll interval is listed in ``late`` and the
    worker's log is kept (``late_log``); a round with no promotion raises, keeping the log
    too (its path is in the message).

    Raises:
        TimeoutError: a round's promotion did not show up within ``ahead_s + 15`` s.
    """
    ns = new_namespace()
    app = tgt.app(ns)
    wid = f"{ns}-w0"
    worker = WorkerProc.start(tgt.worker_env(ns, wid, poll_interval_s=POLL_INTERVAL_S), wid)
    lags: list[int] = []
    claim_lags: list[int] = []
    late: list[dict[str, Any]] = []
    kept: str | None = None
    start_load = load()
    burners: list[subprocess.Popen[bytes]] = []
    try:
        wait_started([worker])
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                   for _ in range(busy)]
        time.sleep(0.5)
        for _ in range(rounds):
            did = uuid.uuid4()
            due_ms = int(app.scheduler.time().timestamp() * 1000) + int(ahead_s * 1000)
            enqueue_on_breach(
                EnqueueOne(request=EnqueueRequest(dispute_id=did, materiality="100.00",
                               source_hash=hashlib.sha256(did.bytes).hexdigest(),
                               due_at=from_ms(due_ms)),
                           actor=app.actor, default_ladder=app.settings.default_ladder),
                core_ports_for(app),
            )
            end = time.monotonic() + ahead_s + 15
            event = None
            while event is None:
                if time.monotonic() > end:
                    path = worker.keep_log(f"no promotion of {did} due at {due_ms} ms")
                    raise TimeoutError(
                        f"precision: no promotion of {did} within {ahead_s + 15:g} s "
                        f"(worker log kept at {path})")
                time.sleep(0.05)
                event = next((e for e in worker.events("escalation.promoted")
                              if e.get("dispute_id") == str(did)), None)
            lags.append(int(event["applied_ms"]) - due_ms)
            claim_lags.append(int(event["lag_ms"]))
            if lags[-1] > POLL_INTERVAL_S * 1000:
                late.append({"dispute_id": str(did), "due_ms": due_ms, "lag_ms": lags[-1]})
        if late:
            kept = str(worker.keep_log(f"{len(late)} firing(s) later than the poll interval: "
                                       f"{late[:5]}"))
    except BaseException:
        if kept is None and worker.proc.poll() is not None:
            kept = str(worker.keep_log("worker exited during the run"))
        raise
    finally:
        for b in burners:
            b.kill()
            b.wait()
        worker.close()
        tgt.cleanup_namespace(ns)
    return {
        "scenario": "precision", "rounds": rounds, "ahead_s": ahead_s, "busy": busy,
        "lag_ms": {"p50": percentile(lags, 50), "p99": percentile(lags, 99),
                   "max": max(lags) if lags else None},
        "claim_lag_ms": {"p50": percentile(claim_lags, 50), "p99": percentile(claim_lags, 99),
                         "max": max(claim_lags) if claim_lags else None},
        "lags_ms": lags, "load": start_load,
        "late": late, "late_log": kept,
    }
