"""Scenario ``notify``: webhook deliveries per second through ``escalation notify``'s path.

Method: ``n`` review-stream entries (``per_dispute`` notifications for each of
``n / per_dispute`` disputes, seq 2, 3, ...) are written to a fresh namespace's review
streams; one :class:`~escalation.service_layer.notify.Notifier` with ``concurrency``
delivery threads and the pooled keep-alive :class:`~escalation.adapters.webhook.WebhookClient`
delivers them to :class:`LoopbackReceiver`, a real HTTP/1.1 server on 127.0.0.1 that answers
each POST after ``delay_ms`` (a slow receiver). The figure is the wall time from the first
``run_once`` until every entry is delivered and acknowledged. The receiver checks every
signature (Standard Webhooks, HMAC-SHA256) and the order per dispute, and counts the TCP
connections it accepted (keep-alive: at most ``concurrency``).
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from escalation.bench.common import Target, load
from escalation.bootstrap import delivery_fanout, reliability_for, webhook_client_for
from escalation.composition_bench import keys, shard_for, webhook_signature
from escalation.composition_cli import webhook_key
from escalation.domain.retry import RetryPolicy
from escalation.service_layer.notify import ConsumeReviews, Notifier, NotifyPorts, NotifyReport

BENCH_SECRET = "whsec_" + base64.b64encode(b"escalation-bench-notify-secret!!").decode()


@dataclass
class Received:
    """One request the receiver answered: whose notification, the answer, when (monotonic
    seconds), and the raw headers (lower-case names) and body."""

    dispute_id: str
    seq: int
    status: int
    started: float
    ended: float
    headers: dict[str, str]
    body: bytes
    verified: bool


@dataclass
class LoopbackReceiver:
    """A threaded HTTP/1.1 server on 127.0.0.1 (keep-alive) that answers each POST after
    ``delay_ms``, with ``status_of(dispute_id, seq, attempt)`` (default 200).

    ``requests`` lists every request; ``overlaps`` counts requests that arrived while another
    one of the same dispute was being answered; ``max_in_flight`` is the most requests
    answered at once; ``connections`` the TCP connections accepted.
    """

    delay_ms: float
    key: bytes
    status_of: Callable[[str, int, int], int] | None = None
    requests: list[Received] = field(default_factory=list)
    overlaps: int = 0
    max_in_flight: int = 0
    connections: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._busy: set[str] = set()
        self._attempts: dict[tuple[str, int], int] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with outer._lock:
                    outer.connections += 1

            def do_POST(self) -> None:
                outer._answer(self)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        started = time.monotonic()
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in handler.headers.items()}
        event = json.loads(body)
        dispute, seq = str(event["dispute_id"]), int(event["seq"])
        ts = int(headers.get("webhook-timestamp", "0"))
        verified = headers.get("webhook-signature") == webhook_signature(
            self.key, headers.get("webhook-id", ""), ts, body)
        with self._lock:
            if dispute in self._busy:
                self.overlaps += 1
            self._busy.add(dispute)
            self.max_in_flight = max(self.max_in_flight, len(self._busy))
            attempt = self._attempts.get((dispute, seq), 0) + 1
            self._attempts[(dispute, seq)] = attempt
        try:
            time.sleep(self.delay_ms / 1000)
            status = 200 if self.status_of is None else self.status_of(dispute, seq, attempt)
        finally:
            with self._lock:
                self._busy.discard(dispute)
                self.requests.append(Received(dispute, seq, status, started, time.monotonic(),
                                              headers, body, verified))
        handler.send_response(status)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    def close(self) -> None:
        """Stop serving and close the socket."""
        self.server.shutdown()
        self.server.server_close()


def write_entries(client: Any, namespace: str, shards: int, disputes: int,
                  per_dispute: int) -> list[str]:
    """XADD ``per_dispute`` notifications (seq 2, 3, ...) for each of ``disputes`` new
    disputes to their shards' review streams, in seq order. Returns the dispute ids."""
    ids = [str(uuid.uuid4()) for _ in range(disputes)]
    pipe = client.pipeline(transaction=False)
    for k in range(per_dispute):
        for did in ids:
            seq = k + 2
            pipe.xadd(keys(namespace, shard_for(did, shards)).review, {
                "dispute_id": did, "seq": str(seq), "idempotency_key": f"{did}:{seq}",
                "kind": "PROMOTED", "match_decision": "PROMOTED_TO_SENIOR",
                "from_tier": "standard", "to_tier": "senior", "ladder": "bench@1",
                "trace_id": uuid.uuid4().hex, "source_hash": "ab", "external_id": "",
                "materiality": "100.00", "decided_ms": str(int(time.time() * 1000))})
    pipe.execute()
    return ids


@dataclass(frozen=True, slots=True)
class NotifyRound:
    """One webhook delivery measurement (the command of :func:`run`).

    ``n``: notifications; ``delay_ms``: the receiver's answer delay, ms; ``concurrency``:
    deliveries at once; ``per_dispute``: notifications per dispute (delivered in order);
    ``timeout_s``: how long every delivery may take, s.
    """

    n: int = 100
    delay_ms: float = 100.0
    concurrency: int = 16
    per_dispute: int = 1
    timeout_s: float = 120.0


def run(tgt: Target, cmd: NotifyRound) -> dict[str, Any]:
    """Deliver ``cmd.n`` notifications to a receiver answering in ``cmd.delay_ms``; returns
    the figures (``seconds``, ``per_s``, ``verified``, ``order_ok``, ``connections``, ...).

    Raises:
        RuntimeError: not every notification was delivered within ``timeout_s``.
    """
    n, delay_ms, concurrency = cmd.n, cmd.delay_ms, cmd.concurrency
    per_dispute, timeout_s = cmd.per_dispute, cmd.timeout_s
    app = tgt.app()
    ns, shards = app.settings.namespace, app.settings.shards
    key = webhook_key(BENCH_SECRET)
    receiver = LoopbackReceiver(delay_ms, key)
    client = webhook_client_for(receiver.url, key, 30.0, concurrency)
    fanout = delivery_fanout(concurrency)
    notifier = Notifier(
        ConsumeReviews("bench", "bench", RetryPolicy((1.0, 1.0, 1.0)), concurrency=concurrency),
        NotifyPorts(reliability_for(app), app.scheduler, app.store, client.deliver, fanout))
    start_load = load()
    try:
        notifier.ensure_groups()
        seeder = tgt.redis()  # the target's Redis, where ``app`` reads the streams
        try:
            write_entries(seeder, ns, shards, max(1, n // per_dispute), per_dispute)
        finally:
            seeder.close()
        total = NotifyReport()
        t0 = time.monotonic()
        while total.delivered < n and time.monotonic() - t0 < timeout_s:
            total.add(notifier.run_once(count=1000))
        elapsed = time.monotonic() - t0
    finally:
        fanout.close()
        client.close()
        receiver.close()
    if total.delivered < n:
        raise RuntimeError(f"notify: {total.delivered} of {n} delivered in {timeout_s:g} s")
    seen: dict[str, int] = {}
    order_ok = True
    for req in sorted(receiver.requests, key=lambda r: r.started):
        order_ok &= req.seq > seen.get(req.dispute_id, 0)
        seen[req.dispute_id] = req.seq
    return {
        "scenario": "notify", "deliveries": total.delivered, "receiver_delay_ms": delay_ms,
        "concurrency": concurrency, "per_dispute": per_dispute,
        "seconds": round(elapsed, 3), "per_s": round(total.delivered / elapsed, 1),
        "verified": sum(r.verified for r in receiver.requests),
        "requests": len(receiver.requests), "order_ok": order_ok,
        "same_dispute_overlaps": receiver.overlaps, "max_in_flight": receiver.max_in_flight,
        "connections": receiver.connections, "load": start_load,
    }
