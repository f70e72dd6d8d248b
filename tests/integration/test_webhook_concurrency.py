"""Webhook delivery with bounded concurrency against a real loopback receiver (real Redis):
one dispute's notifications arrive in seq order and never two at once, also when 5xx
answers send some to the retry set, and every delivery verifies with the reference
Standard Webhooks library."""

from __future__ import annotations

import time
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from escalation.adapters.redis_keys import Keys
from escalation.adapters.webhook import WebhookClient, secret_key
from escalation.bench.notify import BENCH_SECRET, LoopbackReceiver, write_entries
from escalation.bootstrap import delivery_fanout
from escalation.domain.errors import InvalidInput
from escalation.domain.retry import RetryPolicy
from escalation.service_layer.notify import ConsumeReviews, Notifier, NotifyPorts, NotifyReport
from tests.integration.reliability_support import reliability_redis

FAST = RetryPolicy(ladder_s=(0.02, 0.02, 0.02, 0.02, 0.02, 0.02))
DISPUTES, PER_DISPUTE = 12, 4  # seq 2..5 each


def _drain(notifier: Notifier, want: int, rounds: int = 600) -> NotifyReport:
    total = NotifyReport()
    for _ in range(rounds):
        total.add(notifier.run_once())
        if total.delivered >= want:
            return total
        time.sleep(0.01)
    return total


def test_concurrent_delivery_keeps_each_disputes_order_through_5xx_retries(app: Any) -> None:
    ids: list[str] = []

    def status_of(dispute: str, seq: int, attempt: int) -> int:
        n = ids.index(dispute)
        if n % 3 == 0 and seq == 3 and attempt <= 2:
            return 503  # twice: seq 4 and 5 of this dispute must wait for it
        if n % 4 == 1 and seq == 5 and attempt == 1:
            return 500
        return 200

    key = secret_key(BENCH_SECRET)
    receiver = LoopbackReceiver(20.0, key, status_of)
    client = WebhookClient(receiver.url, key, 5.0, max_connections=8)
    fanout = delivery_fanout(8)
    notifier = Notifier(
        ConsumeReviews("c1", "notifier", FAST, concurrency=8),
        NotifyPorts(reliability_redis(app), app.scheduler, app.store, client.deliver, fanout))
    try:
        notifier.ensure_groups()
        ids.extend(write_entries(app.redis, app.settings.namespace, app.settings.shards,
                                 DISPUTES, PER_DISPUTE))
        total = _drain(notifier, DISPUTES * PER_DISPUTE)
    finally:
        fanout.close()
        client.close()
        receiver.close()

    assert total.delivered == DISPUTES * PER_DISPUTE and total.dead == 0
    assert total.deferred == 2 * 4 + 3  # the 503s (twice for 4 disputes) and the 500s
    assert total.held > 0  # later notifications waited behind a failed one
    assert receiver.overlaps == 0  # never two of one dispute at once
    assert receiver.max_in_flight > 1  # and yet concurrent across disputes
    assert receiver.connections <= 8  # pooled, kept alive
    verifier = Webhook(BENCH_SECRET)
    by_start = sorted(receiver.requests, key=lambda r: r.started)
    for i, req in enumerate(by_start):
        event = verifier.verify(req.body, req.headers)  # raises unless it verifies
        assert (event["dispute_id"], event["seq"], event["version"]) == (
            req.dispute_id, req.seq, 1)
        assert req.headers["user-agent"].startswith("escalation/")
        # every earlier seq of this dispute was delivered (2xx) and answered before this one
        done = {r.seq for r in by_start[:i] if r.dispute_id == req.dispute_id
                and r.status == 200 and r.ended <= req.started}
        assert set(range(2, req.seq)) <= done, (req.dispute_id, req.seq, done)
    for did in ids:
        delivered = [r.seq for r in by_start if r.dispute_id == did and r.status == 200]
        assert delivered == [2, 3, 4, 5]
    for shard in range(app.settings.shards):
        keys = Keys(app.settings.namespace, shard)
        assert app.redis.zcard(keys.notify_retry) == 0
        assert app.redis.xpending(keys.review, "notify")["pending"] == 0


def test_concurrency_out_of_range_is_refused_naming_it(app: Any) -> None:
    for bad in (0, 257):
        with pytest.raises(InvalidInput, match="concurrency must be 1-256"):
            Notifier(
                ConsumeReviews("c1", "n", FAST, concurrency=bad),
                NotifyPorts(reliability_redis(app), app.scheduler, app.store, None))
