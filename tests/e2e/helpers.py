"""Helpers for end-to-end tests: enqueue due escalations, run worker processes."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from escalation.bench.common import append_handle
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueMany, EnqueueRequest, enqueue_many
from tests.helpers import own_log


def due_requests(n: int, now: datetime, tier: str = "standard",
                 past_s: float = 5.0) -> list[EnqueueRequest]:
    """``n`` requests already past their SLA window (due ``past_s`` seconds ago)."""
    reqs = []
    for i in range(n):
        did = uuid.uuid4()
        reqs.append(EnqueueRequest(
            dispute_id=did, materiality=Decimal(i % 5000) + Decimal("0.25"),
            source_hash=hashlib.sha256(str(did).encode()).hexdigest(), tier=tier,
            due_at=now - timedelta(seconds=past_s),
        ))
    return reqs


def enqueue(app: Any, reqs: list[EnqueueRequest]) -> list[uuid.UUID]:
    """Enqueue through the service layer; returns the dispute ids."""
    res = enqueue_many(
        EnqueueMany(requests=reqs, actor="test", default_ladder=app.settings.default_ladder),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )
    return [r.escalation.dispute_id for r in res]


def start_worker(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    """Start ``python -m escalation worker ARGS`` with ``env``.

    Output goes to a temporary file (a pipe nobody reads would fill and block the worker);
    read it back with :func:`worker_output`. The level defaults to DEBUG: the tests read
    the per-decision events (``escalation.promoted``...), which INFO leaves out.
    """
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed when the test ends (own_log)
    with append_handle(log) as out:  # the worker's own offset: reading never moves it
        proc = subprocess.Popen(
            [sys.executable, "-m", "escalation", "worker", *args],
            env={"ESCALATION_LOG_LEVEL": "DEBUG", **env}, stdout=out, stderr=subprocess.STDOUT,
        )
    own_log(proc, log)
    return proc


def wait_for_first_log_line(proc: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    """Wait (up to ``timeout_s``) until ``proc`` has exited or written its first log line.

    A worker logs only after its stop-signal handlers are installed, so a SIGTERM from then
    on is a clean stop (exit 0). Before that (the interpreter starting, the imports: seconds
    on a loaded machine) SIGTERM's default action kills it (-15): a test stopping a worker
    that other workers left nothing to do must wait for this first.
    """
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and not worker_output(proc).strip() and time.monotonic() < deadline:
        time.sleep(0.05)


def worker_output(proc: subprocess.Popen[bytes]) -> str:
    """Everything the worker wrote so far."""
    log = proc.log_file  # type: ignore[attr-defined]
    log.seek(0)
    return str(log.read().decode(errors="replace"))
