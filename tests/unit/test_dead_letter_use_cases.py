"""Dead letters (service_layer.dead_letters) on the in-memory fakes: a poison escalation is
dead-lettered at the bound (at once for a broken released ladder file) with a ledger row,
retried back to due, purged with a PURGED row that cancels it; the cap purges only old or
surplus notifications; refusals write nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from escalation.domain.calendars import SlaWindow, WindowUnit
from escalation.domain.errors import ErrorCode, InvalidInput, NotFound
from escalation.domain.escalation import Status
from escalation.domain.ladder import Ladder, Tier
from escalation.domain.timeutil import to_ms
from escalation.ports import ClaimedItem
from escalation.service_layer.dead_letters import (
    DAY_MS,
    DeadLetterCap,
    DeadLetters,
    cap_dead_letters,
)
from tests.fakes import FakeAuditLog, FakeDeadLetterQueue, FakeScheduler, pending, seed

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
LADDER = Ladder(name="dispute_review", version=1,
                tiers=(Tier("standard", "Standard", 10,
                            SlaWindow(24, WindowUnit.CALENDAR_HOURS)),
                       Tier("senior", "Senior", 20, SlaWindow(48, WindowUnit.CALENDAR_HOURS))),
                terminal_tier="senior")


class World:
    """Scheduler, audit log and dead-letter queue; dead letters after 3 failed decisions."""

    def __init__(self) -> None:
        self.scheduler = FakeScheduler(now=T0)
        self.store = FakeAuditLog()
        self.queue = FakeDeadLetterQueue(self.scheduler)
        self.dead = DeadLetters(rel=self.queue, scheduler=self.scheduler, store=self.store,
                                actor="w1", max_decision_attempts=3)

    def claimed(self) -> ClaimedItem:
        """One due escalation, claimed by worker w1."""
        seed(self.store, self.scheduler, pending(LADDER, "standard", T0))
        [item] = self.scheduler.claim(10, 30_000, "w1").items
        return item

    def fail(self, item: ClaimedItem, code: ErrorCode = ErrorCode.LADDER_INVALID) -> bool:
        return self.dead.on_decision_failed(item, code, "unknown ladder dispute_review@1")


def test_a_failing_decision_is_dead_lettered_at_the_bound_with_a_ledger_row() -> None:
    w = World()
    item = w.claimed()
    did = item.escalation.dispute_id
    assert [w.fail(item), w.fail(item)] == [False, False]
    assert w.store.events(did) == ["ENQUEUED"] and w.queue.dead == {}

    assert w.fail(item)

    member = f"decision:{did}"
    [listed] = w.dead.list()
    assert listed["member"] == member and listed["attempts"] == 3
    assert listed["reason"] == "unknown ladder dispute_review@1"
    assert str(did) not in w.scheduler.scores  # out of the schedule
    assert str(did) in w.scheduler.payloads  # kept for the retry
    row = w.store.trail(did)[-1]
    assert (row.event, row.match_decision) == ("DEAD_LETTERED", "DECISION_DEAD_LETTERED")
    assert row.details["attempts"] == 3
    assert w.store.states[did].status is Status.PENDING  # the ledger still owes it


def test_a_broken_released_ladder_file_dead_letters_at_the_first_failure() -> None:
    w = World()
    item = w.claimed()
    assert w.fail(item, ErrorCode.RELEASE_BROKEN)
    assert w.dead.show(f"decision:{item.escalation.dispute_id}")["attempts"] == 1


def test_a_worker_whose_claim_expired_does_not_dead_letter() -> None:
    w = World()
    item = w.claimed()
    w.scheduler.advance(timedelta(seconds=31))  # the lease ended
    assert not w.fail(item, ErrorCode.RELEASE_BROKEN)
    assert w.queue.dead == {}
    assert w.store.events(item.escalation.dispute_id) == ["ENQUEUED"]


def test_retry_puts_the_escalation_back_due_now_and_a_second_retry_is_not_found() -> None:
    w = World()
    item = w.claimed()
    w.fail(item, ErrorCode.RELEASE_BROKEN)
    member = f"decision:{item.escalation.dispute_id}"
    w.scheduler.advance(timedelta(minutes=5))
    assert w.dead.retry(member) == "requeued"
    assert w.scheduler.scores[str(item.escalation.dispute_id)] == to_ms(w.scheduler.now)
    with pytest.raises(NotFound):
        w.dead.retry(member)


def test_retry_all_picks_by_kind_and_by_text_of_the_record() -> None:
    w = World()
    a, b = w.claimed(), w.claimed()
    w.fail(a, ErrorCode.RELEASE_BROKEN)
    w.dead.on_decision_failed(b, ErrorCode.RELEASE_BROKEN, "file reg_z.v2.toml edited")
    w.queue.add_notification("senior|x:2", to_ms(T0), {"fields": {"seq": "2"}})
    assert w.dead.retry_all(kind="decision", match="reg_z.v2.toml") == {"requeued": 1}
    assert [m for m, _, _ in w.queue.dead_list()] == [
        f"decision:{a.escalation.dispute_id}", "notify:senior|x:2"]
    assert w.dead.retry_all(kind="notify") == {"requeued": 1}
    assert w.queue.requeued_notifications[0][1]["last_error"] == "retried by admin"
    with pytest.raises(InvalidInput, match="kind"):
        w.dead.retry_all(kind="poison")


def test_purging_a_poison_escalation_cancels_it_on_the_ledger_and_in_redis() -> None:
    w = World()
    item = w.claimed()
    did = item.escalation.dispute_id
    w.fail(item, ErrorCode.RELEASE_BROKEN)
    assert w.dead.purge(f"decision:{did}", confirm=True, reason="ladder withdrawn")
    row = w.store.trail(did)[-1]
    assert (row.event, row.details["reason"]) == ("PURGED", "ladder withdrawn")
    assert w.store.states[did].status is Status.CANCELLED
    assert str(did) not in w.scheduler.payloads and w.queue.dead == {}


@pytest.mark.parametrize(("confirm", "reason", "needle"), [
    (False, "ok", "not confirmed"), (True, "", "reason"), (True, "a\nb", "reason")])
def test_a_purge_without_confirmation_or_reason_writes_nothing(
    confirm: bool, reason: str, needle: str,
) -> None:
    w = World()
    item = w.claimed()
    w.fail(item, ErrorCode.RELEASE_BROKEN)
    rows = len(w.store.ledger)
    with pytest.raises(InvalidInput, match=needle) as err:
        w.dead.purge(f"decision:{item.escalation.dispute_id}", confirm=confirm, reason=reason)
    assert len(w.store.ledger) == rows and len(w.queue.dead) == 1
    # the use case serves the CLI and the console: it names no interface's control
    assert "--" not in str(err.value)
    assert (err.value.field == "confirm") is (not confirm)


@pytest.mark.parametrize("limit", [0, 10_001])
def test_list_refuses_a_limit_outside_1_to_10000(limit: int) -> None:
    with pytest.raises(InvalidInput, match="limit"):
        World().dead.list(limit)


def test_the_cap_purges_old_and_surplus_notifications_never_escalations() -> None:
    w = World()
    poison = w.claimed()
    w.fail(poison, ErrorCode.RELEASE_BROKEN)  # dead-lettered at T0
    w.scheduler.advance(timedelta(days=8))  # the poison escalation is now 8 days old
    now = to_ms(w.scheduler.now)
    w.queue.add_notification("g|old:2", now - 9 * DAY_MS, {"fields": {}})
    for i in range(3):
        w.queue.add_notification(f"g|new{i}:2", now - (3 - i) * 1000, {"fields": {}})

    report = cap_dead_letters(DeadLetterCap(max_count=3, max_age_days=7), w.dead)

    assert report.over_cap and report.count == 5 and report.decisions == 1
    # the old one by age, then the oldest beyond 3 (the poison escalation counts, kept)
    assert report.purged == ["notify:g|old:2", "notify:g|new0:2"]
    assert report.kept_decisions_over_cap == 1
    assert f"decision:{poison.escalation.dispute_id}" in w.queue.dead


def test_within_the_cap_nothing_is_read_beyond_the_oldest_and_nothing_purged() -> None:
    w = World()
    w.queue.add_notification("g|a:2", to_ms(T0) - 1000, {"fields": {}})
    report = cap_dead_letters(DeadLetterCap(max_count=5, max_age_days=7), w.dead)
    assert (report.count, report.decisions, report.purged, report.over_cap) == (1, -1, [], False)
    assert report.oldest_age_ms == 1000


@pytest.mark.parametrize(("count", "days"), [(0, 7), (5, 0)])
def test_a_cap_below_one_is_refused(count: int, days: int) -> None:
    with pytest.raises(InvalidInput):
        DeadLetterCap(max_count=count, max_age_days=days)
