"""A worker frozen (SIGSTOP) past its lease while another takes over, then resumed (SIGCONT).

docs/architecture.md, the firing protocol's crash table, "stale worker (paused past its
lease)": its record finds a newer decision (STALE) and its apply cannot change anything (the
lock's fencing token is no longer its own, and the payload already carries the newer seq) --
no double decision.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
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

pytestmark = [pytest.mark.fault, pytest.mark.slow]

N = 200
BATCH = 50


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


def test_frozen_worker_resumed_after_takeover_records_stale_and_changes_nothing(
    app: Any, redis_url: str, database_url: str, namespace: str
) -> None:
    ids = enqueue(app, due_requests(N, app.scheduler.time()))
    env = worker_env(redis_url, database_url, namespace, ESCALATION_FAULT_FREEZE="after_claim:2")
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the process
    with append_handle(log) as out:  # own offset, O_APPEND
        frozen = subprocess.Popen(
            [sys.executable, "-m", "tests.fault.worker_main", "worker", *WORKER_ARGS,
             "--batch-size", str(BATCH), "--worker-id", "frozen"],
            env=env, stdout=out, stderr=subprocess.STDOUT)
    frozen.log_file = log  # type: ignore[attr-defined]
    healthy = None
    try:
        assert wait_until(lambda: frozen.poll() is None and _state(frozen.pid) == "T", 60), (
            worker_output(frozen)[-2000:])
        stats_before = app.scheduler.stats()
        healthy = spawn(worker_env(redis_url, database_url, namespace), "healthy", BATCH)
        # the healthy worker decides everything, including the frozen batch once its lease ends
        assert wait_until(lambda: settled(app, ids), 60), worker_output(healthy)[-2000:]
        frozen.send_signal(signal.SIGCONT)
        assert wait_until(
            lambda: len(_events(worker_output(frozen), "escalation.stale_claim", "frozen"))
            >= BATCH, 30), worker_output(frozen)[-3000:]
    finally:
        codes = stop([p for p in (frozen, healthy) if p is not None])
    assert codes == [0, 0]
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
