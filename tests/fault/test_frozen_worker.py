"""A worker frozen (SIGSTOP) past its lease while another takes over, then resumed (SIGCONT).

docs/architecture.md, the firing protocol's crash table, "stale worker (paused past its
lease)": its record finds a newer decision (STALE) and its apply cannot change anything (the
lock's fencing token is no longer its own, and the payload already carries the newer seq) --
no double decision.

It also times the takeover: the frozen batch must be recorded by the other worker within
lease + poll interval (+ ``TOLERANCE_S``) of the freeze. The other worker runs before anything
is due (as in production): started only after the freeze, its start-up (2.7 s and 6.6 s in
two runs on a busy 2-core machine, about 12 s in a rare late one) was what the takeover waited
for, not the lease. With
``ESCALATION_FAULT_LOG_DIR`` set, each run keeps both workers' logs and a timeline (batches and
warnings per worker, the frozen batch's decision times from the DEBUG per-decision events) in
that directory, for runs repeated to chase a rare late takeover (docs/reliability.md, "Recovery
after an outage and takeover after a lease").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from escalation.bench.common import append_handle
from tests.e2e.helpers import due_requests, enqueue, worker_output
from tests.fault.support import (
    WORKER_ARGS,
    assert_exactly_once,
    settled,
    spawn,
    stop,
    wait_until,
    worker_env,
)
from tests.helpers import own_log

pytestmark = [pytest.mark.fault, pytest.mark.slow]

N = 1000  # enough batches that the frozen worker gets its second one beside the other
BATCH = 50
LEASE_S, POLL_S = 5.0, 1.0  # tests.fault.support.WORKER_ARGS
TOLERANCE_S = 2.0  # stated: the other worker's start-up, batch and log writes on 2 busy cores


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def _events(text: str, event: str, worker: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        if line.startswith("{") and f'"{event}"' in line:
            rec = json.loads(line)
            if rec.get("event") == event and rec.get("worker_id") == worker:
                out.append(rec)
    return out


def _epoch_s(rec: dict[str, Any]) -> float:
    return datetime.fromisoformat(rec["timestamp"].replace("Z", "+00:00")).timestamp()


def _timeline(logs: dict[str, str], frozen_at: float) -> dict[str, Any]:
    """Per worker: its batches (seconds after the freeze, claimed, recorded) and when the
    frozen batch's members were decided (applied_ms of the per-decision DEBUG events)."""
    stale_ids = {e["dispute_id"] for e in _events(logs["frozen"], "escalation.stale_claim",
                                                  "frozen")}
    out: dict[str, Any] = {"frozen_at": frozen_at, "frozen_batch": len(stale_ids)}
    for name, text in logs.items():
        out[name] = {
            "batches": [(round(_epoch_s(b) - frozen_at, 2), b.get("claimed"), b.get("recorded"))
                        for b in _events(text, "worker.batch", name)],
            "other": [(round(_epoch_s(r) - frozen_at, 2), r["event"])
                      for r in (json.loads(x) for x in text.splitlines() if x.startswith("{"))
                      if r.get("level") in ("warning", "error")],
        }
    taken = [e["applied_ms"] / 1000.0 - frozen_at
             for e in _events(logs.get("healthy", ""), "escalation.promoted", "healthy")
             if e["dispute_id"] in stale_ids]
    out["takeover_s"] = (round(min(taken), 2), round(max(taken), 2)) if taken else None
    return out


def test_frozen_worker_resumed_after_takeover_records_stale_and_changes_nothing(
    app: Any, redis_url: str, database_url: str, namespace: str
) -> None:
    healthy = spawn(worker_env(redis_url, database_url, namespace), "healthy", BATCH)
    env = worker_env(redis_url, database_url, namespace, ESCALATION_FAULT_FREEZE="after_claim:2")
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed when the test ends (own_log)
    with append_handle(log) as out:  # own offset, O_APPEND
        frozen = subprocess.Popen(
            [sys.executable, "-m", "tests.fault.worker_main", "worker", *WORKER_ARGS,
             "--batch-size", str(BATCH), "--worker-id", "frozen"],
            env=env, stdout=out, stderr=subprocess.STDOUT)
    own_log(frozen, log)
    try:
        assert wait_until(lambda: all('"worker.started"' in worker_output(p)
                                      for p in (frozen, healthy)), 120), (
            worker_output(frozen)[-2000:], worker_output(healthy)[-2000:])
        ids = enqueue(app, due_requests(N, app.scheduler.time()))
        assert wait_until(lambda: frozen.poll() is None and _state(frozen.pid) == "T", 60,
                          0.02), worker_output(frozen)[-2000:]
        frozen_at = time.time()  # within 20 ms of the claim it froze after
        stats_before = app.scheduler.stats()
        # the healthy worker decides everything, including the frozen batch once its lease ends
        assert wait_until(lambda: settled(app, ids), 60), worker_output(healthy)[-2000:]
        frozen.send_signal(signal.SIGCONT)
        assert wait_until(
            lambda: len(_events(worker_output(frozen), "escalation.stale_claim", "frozen"))
            >= BATCH, 30), worker_output(frozen)[-3000:]
    finally:
        codes = stop([frozen, healthy])
    logs = {"frozen": worker_output(frozen), "healthy": worker_output(healthy)}
    timeline = _timeline(logs, frozen_at)
    keep = os.environ.get("ESCALATION_FAULT_LOG_DIR")
    if keep:
        run = Path(keep) / f"frozen-{int(frozen_at)}"
        run.mkdir(parents=True, exist_ok=True)
        for name, text in logs.items():
            (run / f"{name}.log").write_text(text)
        (run / "timeline.json").write_text(json.dumps(timeline, indent=1))
    assert codes == [0, 0]
    assert timeline["takeover_s"] is not None, timeline
    assert timeline["takeover_s"][1] <= LEASE_S + POLL_S + TOLERANCE_S, timeline
    stale = _events(worker_output(frozen), "escalation.stale_claim", "frozen")
    assert len(stale) == BATCH
    assert all(e["claimed_seq"] == 1 and e["recorded_seq"] == 2 for e in stale)
    stats_after = app.scheduler.stats()
    refused = sum((stats_after.get(k) or 0) - (stats_before.get(k) or 0)
                  for k in ("stale_apply", "not_owner"))
    assert refused >= BATCH  # its apply was refused (seq guard / fencing token), op by op
    promoted_by_frozen = _events(worker_output(frozen), "escalation.promoted", "frozen")
    assert len(promoted_by_frozen) == BATCH  # batch 1 only, before the freeze
    assert_exactly_once(app, ids)
