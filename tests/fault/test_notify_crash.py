"""The notification consumer SIGKILLed mid-stream: every notification still reaches the
webhook at least once, always under one idempotency key per decision (docs/reliability.md).

The killed consumer's delivered-but-unacknowledged entries stay pending in the consumer group;
a second consumer takes them over with XAUTOCLAIM once idle (``--idle-ms``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from escalation.bench.common import append_handle
from tests.e2e.helpers import due_requests, enqueue, worker_output
from tests.e2e.test_firing_protocol import fire
from tests.fault.support import check, settled, stop, wait_until, worker_env
from tests.helpers import own_log

pytestmark = [pytest.mark.fault, pytest.mark.slow]

N = 200


class Receiver:
    """A webhook receiver: records (Idempotency-Key header, body) of every POST."""

    def __init__(self) -> None:
        self.got: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                time.sleep(0.01)  # a slow receiver: the kill lands mid-stream
                with receiver.lock:
                    receiver.got.append((self.headers.get("Idempotency-Key", ""), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self) -> int:
        with self.lock:
            return len(self.got)


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()  # its listening socket: left to the GC, an unclosed socket


def _notify(env: dict[str, str], url: str, worker_id: str) -> subprocess.Popen[bytes]:
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed when the test ends (own_log)
    with append_handle(log) as out:  # own offset, O_APPEND
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fault.notify_main", url, worker_id, "2000"],
            env=env, stdout=out, stderr=subprocess.STDOUT)
    own_log(proc, log)
    return proc


def test_notify_consumer_killed_mid_stream_every_notification_delivered_with_one_key(
    app: Any, redis_url: str, database_url: str, namespace: str, receiver: Receiver
) -> None:
    ids = enqueue(app, due_requests(N, app.scheduler.time()))
    assert wait_until(lambda: fire(app, batch=100).claimed == 0 and settled(app, ids), 30)
    verdict = check(app, ids)
    assert verdict.notes == N and not verdict.problems()
    env = worker_env(redis_url, database_url, namespace)
    first = _notify(env, receiver.url, "notify-a")
    assert wait_until(lambda: receiver.count() >= 30 or first.poll() is not None, 60)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    killed_at = receiver.count()
    second = _notify(env, receiver.url, "notify-b")
    try:
        expected = {f"{d}:2" for d in ids}
        ok = wait_until(lambda: expected <= {k for k, _ in list(receiver.got)}, 60)
        assert ok, (killed_at, receiver.count(), len(expected - {k for k, _ in receiver.got}),
                    second.poll(), worker_output(second)[-2000:], worker_output(first)[-1000:])
    finally:
        stop([second])
    keys_per_decision: dict[tuple[str, int], set[str]] = defaultdict(set)
    for key, body in receiver.got:
        # the versioned event body (docs/reliability.md "Webhook event"): ``id`` is the
        # idempotency key, the same as the Idempotency-Key header; ``seq`` is an integer
        assert key == body["id"]
        keys_per_decision[(body["dispute_id"], body["seq"])].add(key)
    assert len(keys_per_decision) == N
    assert all(ks == {f"{d}:{s}"} for (d, s), ks in keys_per_decision.items())
    assert killed_at < N  # the kill really landed mid-stream
