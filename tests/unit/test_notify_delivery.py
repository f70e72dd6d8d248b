"""Review notifications (service_layer.notify) on the in-memory stream: delivered and
acknowledged, retried after a failure, dead-lettered with a ledger row once the retries are
spent, one dispute's in seq order, another tier's skipped, a crashed consumer's taken over."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

import pytest

from escalation.domain.calendars import SlaWindow, WindowUnit
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation
from escalation.domain.ladder import Ladder, Tier
from escalation.domain.retry import RetryPolicy
from escalation.service_layer.core import ONE_BY_ONE, Fanout
from escalation.service_layer.notify import ConsumeReviews, Notifier, NotifyPorts, parse_backoff
from tests.fakes import (
    FakeAuditLog,
    FakeDeadLetterQueue,
    FakeReviewStreams,
    FakeScheduler,
    pending,
    seed,
)

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
A = TypeVar("A")
R = TypeVar("R")
LADDER = Ladder(name="dispute_review", version=1,
                tiers=(Tier("standard", "Standard", 10,
                            SlaWindow(24, WindowUnit.CALENDAR_HOURS)),
                       Tier("senior", "Senior", 20, SlaWindow(48, WindowUnit.CALENDAR_HOURS))),
                terminal_tier="senior")


class Webhook:
    """Records deliveries; fails those whose idempotency key is in ``failing``."""

    def __init__(self) -> None:
        self.got: list[str] = []
        self.failing: set[str] = set()

    def __call__(self, fields: Mapping[str, str]) -> None:
        key = fields["idempotency_key"]
        if key in self.failing:
            raise ConnectionError(f"503 from the webhook for {key}")
        self.got.append(key)


class ReversedFanout:
    """A fanout that runs the calls of a step in the reverse order (as helper threads may)
    and gives the results in the items' order; records the items of each call."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def map(self, fn: Callable[[A], R], items: Iterable[A]) -> Iterator[R]:
        todo = list(items)
        for item in todo:
            self.calls.append([i.fields["idempotency_key"]
                               for i in cast(list[Any], item)])
        results = [fn(item) for item in reversed(todo)]
        return iter(reversed(results))


class World:
    def __init__(self, *, tier: str | None = None, deliver: bool = True,
                 concurrency: int = 1, fanout: Fanout = ONE_BY_ONE) -> None:
        self.scheduler = FakeScheduler(now=T0)
        self.store = FakeAuditLog()
        self.dead = FakeDeadLetterQueue(self.scheduler)
        self.streams = FakeReviewStreams(self.scheduler, self.dead)
        self.webhook = Webhook()
        self.notifier = Notifier(
            ConsumeReviews("n1", "notifier", RetryPolicy((10.0,)), tier=tier,
                           concurrency=concurrency),
            NotifyPorts(self.streams, self.scheduler, self.store,
                        self.webhook if deliver else None, fanout), rng=random.Random(7))

    def dispute(self) -> Escalation:
        return seed(self.store, self.scheduler, pending(LADDER, "standard", T0))

    def entry(self, esc: Escalation, seq: int, to_tier: str = "senior") -> str:
        key = f"{esc.dispute_id}:{seq}"
        self.scheduler.review.append({"dispute_id": str(esc.dispute_id), "seq": str(seq),
                                      "idempotency_key": key, "to_tier": to_tier})
        return key


def test_an_entry_is_delivered_and_acknowledged() -> None:
    w = World()
    key = w.entry(w.dispute(), 2)
    report = w.notifier.run_once()
    assert w.webhook.got == [key]
    assert (report.delivered, report.deferred, report.dead) == (1, 0, 0)
    assert w.streams.pending["notify"] == {} and w.streams.counts == {"delivered": 1}
    assert w.notifier.run_once().handled == 0  # nothing delivered twice


def test_without_a_webhook_entries_are_only_acknowledged() -> None:
    w = World(deliver=False)
    w.entry(w.dispute(), 2)
    report = w.notifier.run_once()
    assert (report.acknowledged, report.delivered) == (1, 0)
    assert w.streams.pending["notify"] == {}


def test_a_failed_delivery_is_retried_after_its_backoff() -> None:
    w = World()
    key = w.entry(w.dispute(), 2)
    w.webhook.failing.add(key)
    assert w.notifier.run_once().deferred == 1
    [(member, at_ms)] = w.streams.notify_retry_waiting(0)
    assert member == f"notify|{key}" and at_ms >= w.streams.now_ms() + 10_000
    assert w.streams.pending["notify"] == {}  # acknowledged: the retry set holds it now
    w.webhook.failing.clear()
    assert w.notifier.run_once().delivered == 0  # not due yet
    w.scheduler.advance(timedelta(seconds=21))  # past the jitter window [10 s, 20 s)
    assert w.notifier.run_once().delivered == 1
    assert w.webhook.got == [key] and w.streams.retries == {}


def test_spent_retries_dead_letter_the_notification_with_a_ledger_row() -> None:
    w = World()
    esc = w.dispute()
    key = w.entry(esc, 2)
    w.webhook.failing.add(key)
    w.notifier.run_once()
    w.scheduler.advance(timedelta(seconds=21))
    report = w.notifier.run_once()
    assert report.dead == 1 and w.streams.retries == {}
    [(member, _, record)] = w.dead.dead_list()
    assert member == f"notify:notify|{key}" and record["attempts"] == 2
    assert "503 from the webhook" in record["reason"]
    row = w.store.trail(esc.dispute_id)[-1]
    assert (row.event, row.match_decision) == ("DEAD_LETTERED", "NOTIFICATION_DEAD_LETTERED")
    assert row.details["idempotency_key"] == key
    assert w.scheduler.payloads[str(esc.dispute_id)].seq == row.seq  # payload realigned


def test_a_later_notification_of_a_dispute_waits_behind_a_failed_earlier_one() -> None:
    w = World()
    esc, other = w.dispute(), w.dispute()
    first, second = w.entry(esc, 2), w.entry(esc, 3)
    unrelated = w.entry(other, 2)
    w.webhook.failing.add(first)
    report = w.notifier.run_once()
    assert (report.deferred, report.held, report.delivered) == (1, 1, 1)
    assert w.webhook.got == [unrelated]  # the dispute's seq 3 did not overtake seq 2
    w.webhook.failing.clear()
    w.scheduler.advance(timedelta(seconds=21))
    w.notifier.run_once()
    assert w.webhook.got == [unrelated, first, second]


def test_a_tier_queue_skips_other_tiers_entries() -> None:
    w = World(tier="senior")
    esc = w.dispute()
    mine, theirs = w.entry(esc, 2, "senior"), w.entry(w.dispute(), 2, "compliance")
    report = w.notifier.run_once()
    assert (report.delivered, report.skipped) == (1, 1)
    assert w.webhook.got == [mine] and theirs not in w.webhook.got
    assert w.streams.pending["notify.senior"] == {}


def test_entries_a_crashed_consumer_left_pending_are_taken_over_when_idle() -> None:
    w = World()
    key = w.entry(w.dispute(), 2)
    w.notifier.ensure_groups()
    w.streams.review_read(0, "notify", "crashed", 10, None)  # read, never acknowledged
    assert w.notifier.run_once().handled == 0  # not idle long enough yet
    w.scheduler.advance(timedelta(minutes=1))
    report = w.notifier.run_once()
    assert (report.recovered, report.delivered) == (1, 1) and w.webhook.got == [key]


def test_with_concurrency_each_dispute_is_one_fanout_call_in_seq_order() -> None:
    fanout = ReversedFanout()
    w = World(concurrency=4, fanout=fanout)
    esc, other, third = w.dispute(), w.dispute(), w.dispute()
    late = w.entry(esc, 3)  # the stream holds seq 3 before seq 2
    early = w.entry(esc, 2)
    o2, o3, o4 = w.entry(other, 2), w.entry(other, 3), w.entry(other, 4)
    t2 = w.entry(third, 2)
    w.webhook.failing.add(o3)
    report = w.notifier.run_once()
    assert sorted(fanout.calls) == sorted([[early, late], [o2, o3, o4], [t2]])
    assert w.webhook.got.index(early) < w.webhook.got.index(late)
    assert o3 not in w.webhook.got and o4 not in w.webhook.got  # stopped at the failure
    assert (report.delivered, report.deferred, report.held) == (4, 1, 1)
    w.webhook.failing.clear()
    w.scheduler.advance(timedelta(seconds=21))
    w.notifier.run_once()
    assert [k for k in w.webhook.got if k in (o2, o3, o4)] == [o2, o3, o4]


def test_one_at_a_time_the_fanout_is_not_used() -> None:
    fanout = ReversedFanout()
    w = World(concurrency=1, fanout=fanout)
    w.entry(w.dispute(), 2)
    w.entry(w.dispute(), 2)
    assert w.notifier.run_once().delivered == 2 and fanout.calls == []


@pytest.mark.parametrize("concurrency", [0, 10_000])
def test_concurrency_outside_its_range_is_refused(concurrency: int) -> None:
    w = World()
    with pytest.raises(InvalidInput, match="concurrency"):
        Notifier(
            ConsumeReviews("c", "a", RetryPolicy((1.0,)), concurrency=concurrency),
            NotifyPorts(w.streams, w.scheduler, w.store, None))


@pytest.mark.parametrize(("text", "needle"), [
    ("", "--backoff"), ("soon", "--backoff"), ("5,nan", "--backoff"),
    ("0", "retry step"), ("-5", "retry step")])
def test_a_bad_backoff_is_refused_saying_what_is_wrong(text: str, needle: str) -> None:
    with pytest.raises(InvalidInput, match=needle):
        parse_backoff(text)
    assert parse_backoff("5,30").ladder_s == (5.0, 30.0)
