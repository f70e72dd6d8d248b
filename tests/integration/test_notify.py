"""Notification delivery: consumer group, webhook with Idempotency-Key, retries with backoff,
dead letter after the last attempt, XAUTOCLAIM recovery (docs/reliability.md)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import sqlalchemy as sa

from escalation.adapters.webhook import post_notification
from escalation.domain.retry import RetryPolicy
from escalation.service_layer.core import CorePorts
from escalation.service_layer.fire import FireDue, fire_due
from escalation.service_layer.notify import ConsumeReviews, Notifier, NotifyPorts, NotifyReport
from tests.e2e.helpers import due_requests, enqueue
from tests.integration.reliability_support import reliability_redis

FAST = RetryPolicy(ladder_s=(0.01, 0.01, 0.01, 0.01))


class Receiver:
    """A real HTTP server on 127.0.0.1 that fails the first ``fail`` requests per key."""

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                key = self.headers["Idempotency-Key"]
                with outer.lock:
                    outer.calls.append((key, body))
                    seen = sum(1 for k, _ in outer.calls if k == key)
                code = 503 if outer.fail < 0 or seen <= outer.fail else 200
                self.send_response(code)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def receiver_factory() -> Iterator[Any]:
    made: list[Receiver] = []

    def make(fail: int) -> Receiver:
        made.append(Receiver(fail))
        return made[-1]

    yield make
    for r in made:
        r.close()


def _promote(app: Any, n: int) -> list[Any]:
    ids = enqueue(app, due_requests(n, app.scheduler.time()))
    report = fire_due(
        FireDue(batch_size=100, lease_ms=30_000, worker_id="w"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )
    assert report.recorded == n
    return ids


def _notifier(app: Any, url: str | None, policy: RetryPolicy = FAST, **kw: Any) -> Notifier:
    deliver = None if url is None else (lambda f: post_notification(url, f, 2.0, b"test-secret"))
    return Notifier(
        ConsumeReviews(kw.pop("consumer", "c1"), "notifier", policy, **kw),
        NotifyPorts(reliability_redis(app), app.scheduler, app.store, deliver))


def _drain(notifier: Notifier, until: Any, rounds: int = 400) -> NotifyReport:
    total = NotifyReport()
    for _ in range(rounds):
        r = notifier.run_once()
        for k in total.__dict__:
            setattr(total, k, getattr(total, k) + getattr(r, k))
        if until(total):
            return total
        time.sleep(0.01)
    return total


def test_notification_is_posted_with_its_idempotency_key_and_acknowledged(
    app: Any, receiver_factory: Any
) -> None:
    rx = receiver_factory(0)
    ids = _promote(app, 3)
    n = _notifier(app, rx.url)
    report = n.run_once()
    assert report.delivered == 3
    keys = {k for k, _ in rx.calls}
    assert keys == {f"{d}:2" for d in ids}  # <dispute>:<seq of the promotion row>
    assert all(b["match_decision"] == "PROMOTED_TO_SENIOR" for _, b in rx.calls)
    stream = app.scheduler.keys_for(ids[0]).review
    assert app.redis.xpending(stream, "notify")["pending"] == 0


def test_failing_receiver_is_retried_with_backoff_until_it_succeeds(
    app: Any, receiver_factory: Any
) -> None:
    rx = receiver_factory(2)  # fails twice per key, then 200
    ids = _promote(app, 2)
    n = _notifier(app, rx.url)
    total = _drain(n, lambda t: t.delivered >= 2)
    assert total.delivered == 2 and total.dead == 0 and total.deferred == 4
    assert len(rx.calls) == 6  # 3 attempts each
    keys = app.scheduler.keys_for(ids[0])
    assert app.redis.zcard(keys.notify_retry) == 0 and app.redis.hlen(keys.notify_data) == 0


def test_retry_is_scheduled_between_the_first_and_second_ladder_steps(
    app: Any, receiver_factory: Any
) -> None:
    rx = receiver_factory(-1)
    ids = _promote(app, 1)
    n = _notifier(app, rx.url, policy=RetryPolicy())
    before = reliability_redis(app).now_ms()
    assert n.run_once().deferred == 1
    keys = app.scheduler.keys_for(ids[0])
    ((member, score),) = app.redis.zrange(keys.notify_retry, 0, -1, withscores=True)
    assert member == f"notify|{ids[0]}:2"
    assert before + 5000 <= score <= before + 30_000 + 1000  # [5 s, 30 s)


def test_always_failing_receiver_ends_in_the_dead_letter_set_with_a_ledger_row(
    app: Any, receiver_factory: Any
) -> None:
    rx = receiver_factory(-1)
    (did,) = _promote(app, 1)
    n = _notifier(app, rx.url)
    total = _drain(n, lambda t: t.dead >= 1)
    assert total.dead == 1 and total.delivered == 0
    assert len(rx.calls) == FAST.max_attempts  # 5 attempts, then dead
    rel = reliability_redis(app)
    (member, _ms, record) = rel.dead_list()[0]
    assert member == f"notify:notify|{did}:2"
    assert record["attempts"] == 5 and record["reason"] == "HTTP 503"
    trail = app.store.trail(did)
    assert trail[-1].event == "DEAD_LETTERED"
    assert trail[-1].details["idempotency_key"] == f"{did}:2"
    # the Redis payload follows the new sequence number, so no worker claim turns STALE
    assert app.scheduler.payload(did)["seq"] == str(trail[-1].seq)


def test_crashed_consumers_pending_entries_are_taken_over_after_idle_time(
    app: Any, receiver_factory: Any
) -> None:
    rx = receiver_factory(0)
    ids = _promote(app, 2)
    crashed = _notifier(app, rx.url, consumer="crashed")
    crashed.ensure_groups()
    streams = sorted({app.scheduler.keys_for(d).review for d in ids})  # one per shard used

    def pending() -> int:
        return sum(int(app.redis.xpending(s, "notify")["pending"]) for s in streams)

    # the crashed consumer read the entries and died before delivering / acknowledging
    for stream in streams:  # one stream per call: on a cluster each shard is its own slot
        app.redis.xreadgroup("notify", "crashed", {stream: ">"}, count=10)
    assert pending() == 2
    survivor = _notifier(app, rx.url, consumer="survivor", idle_ms=1)
    time.sleep(0.01)
    report = survivor.run_once()
    assert report.recovered == 2 and report.delivered == 2
    assert pending() == 0


def test_tier_group_delivers_only_its_tier_and_skips_others(
    app: Any, receiver_factory: Any
) -> None:
    rx = receiver_factory(0)
    _promote(app, 2)
    assert _notifier(app, rx.url, tier="compliance").run_once().skipped == 2
    assert rx.calls == []
    assert _notifier(app, rx.url, tier="senior").run_once().delivered == 2


def test_dead_lettered_notification_row_is_on_the_dispute_chain_which_still_verifies(
    app: Any, receiver_factory: Any
) -> None:
    rx = receiver_factory(-1)
    (did,) = _promote(app, 1)
    _drain(_notifier(app, rx.url), lambda t: t.dead >= 1)
    assert app.store.verify(did) == []
    with app.engine.connect() as conn:
        n = conn.execute(sa.text("SELECT count(*) FROM escalation_audit WHERE dispute_id = :d "
                                 "AND event = 'DEAD_LETTERED'"), {"d": did}).scalar()
    assert n == 1


def test_without_a_webhook_notifications_count_as_acknowledged_not_delivered(app: Any) -> None:
    _promote(app, 2)
    report = _notifier(app, None).run_once()
    assert report.acknowledged == 2 and report.delivered == 0
    assert "acknowledged without delivery 2" in report.summary()


@pytest.mark.parametrize("text", ["abc", "5,x,300", "", ",", "nan", "5,-1"])
def test_a_malformed_backoff_is_refused_as_invalid_input(text: str) -> None:
    from escalation.domain.errors import InvalidInput
    from escalation.service_layer.notify import parse_backoff

    with pytest.raises(InvalidInput):
        parse_backoff(text)
    assert parse_backoff("5, 30,300").ladder_s == (5.0, 30.0, 300.0)


def test_notify_cli_without_webhook_is_refused_unless_discard(
    app: Any, cli_env: dict[str, str]
) -> None:
    from tests.helpers import run_cli

    _promote(app, 3)
    refused = run_cli(cli_env, "notify", "--burst")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "error: --webhook-url is required (or ESCALATION_WEBHOOK_URL); pass --discard to "
        "acknowledge notifications without delivering them"]
    # the refused run acknowledged nothing: all 3 are still there for --discard
    res = run_cli(cli_env, "notify", "--burst", "--discard")
    assert res.returncode == 0, res.stderr
    logs = res.stdout + res.stderr
    assert logs.count("notify.no_webhook") == 1
    assert ("notify: delivered 0, acknowledged without delivery 3, retried 0, "
            "dead-lettered 0 (no webhook configured)") in res.stdout


def test_notify_cli_with_a_bad_backoff_exits_2_with_the_expected_format(
    cli_env: dict[str, str]
) -> None:
    from tests.helpers import run_cli

    res = run_cli(cli_env, "notify", "--burst", "--backoff", "abc")
    assert res.returncode == 2
    assert "--backoff must be comma-separated seconds, e.g. 5,30,300,3600" in res.stderr
    assert "Traceback" not in res.stderr


def test_notify_burst_for_one_tier_reads_past_a_full_page_of_other_tiers(
    app: Any, cli_env: dict[str, str], topology_shards: int
) -> None:
    # `notify --tier compliance --burst` stopped after a pass that only skipped other tiers'
    # entries (100 per shard per pass) and exited 0, leaving every compliance entry behind
    from tests.helpers import run_cli

    def fire(n: int) -> None:
        report = fire_due(
            FireDue(batch_size=500, lease_ms=30_000, worker_id="w"),
            CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                      calendars=app.calendars),
        )
        assert report.recorded == n

    # first in the streams: more than a page (100) per shard of standard -> senior entries
    enqueue(app, due_requests(130 * topology_shards, app.scheduler.time()))
    fire(130 * topology_shards)
    enqueue(app, due_requests(3, app.scheduler.time(), tier="senior"))
    fire(3)  # senior -> compliance: after them
    res = run_cli(cli_env, "notify", "--tier", "compliance", "--burst", "--discard")
    assert res.returncode == 0, res.stderr
    assert "acknowledged without delivery 3," in res.stdout, res.stdout + res.stderr[-2000:]
