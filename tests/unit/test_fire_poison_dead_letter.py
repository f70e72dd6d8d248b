"""A poison escalation through ``fire_due`` into the dead letters, on the in-memory fakes,
wired as the worker wires them (``FiringHooks.on_poison = DeadLetters.on_decision_failed``):
the error's code decides, never its text. An unknown ladder version (``LADDER_INVALID``) is
retried each lease until the bound; a broken released ladder file (``RELEASE_BROKEN``) is
dead-lettered at its first failure. Either way nothing is decided for it."""

from __future__ import annotations

from datetime import timedelta

from escalation.domain.errors import ErrorCode, LadderReleaseError
from escalation.domain.ladder import Ladder
from escalation.domain.timeutil import to_ms
from escalation.ports import ClaimedItem
from escalation.service_layer.core import CorePorts
from escalation.service_layer.dead_letters import DeadLetters
from escalation.service_layer.fire import BatchReport, FireDue, FiringHooks, fire_due
from tests.fakes import FakeAuditLog, FakeDeadLetterQueue, FakeLadders, FakeScheduler, seed
from tests.fakes import pending as pending_escalation
from tests.unit.test_fire_and_enqueue import CALS, LADDER, LEASE_MS, T0


class BrokenRelease(FakeLadders):
    """Ladder v1 whose released file was edited: every read of it raises."""

    def get(self, name: str, version: int) -> Ladder:
        raise LadderReleaseError(f"ladder {name}@{version}: the released file was edited")


class World:
    """Fakes wired as the worker wires them; dead letters after 3 failed decisions."""

    def __init__(self, ladders: FakeLadders) -> None:
        self.scheduler = FakeScheduler(now=T0)
        self.store = FakeAuditLog()
        self.queue = FakeDeadLetterQueue(self.scheduler)
        self.dead = DeadLetters(rel=self.queue, scheduler=self.scheduler, store=self.store,
                                actor="w1", max_decision_attempts=3)
        self.ladders = ladders
        self.codes: list[ErrorCode] = []

    def on_poison(self, item: ClaimedItem, code: ErrorCode, error: str) -> bool:
        self.codes.append(code)
        return self.dead.on_decision_failed(item, code, error)

    def fire(self) -> BatchReport:
        return fire_due(
            FireDue(batch_size=10, lease_ms=LEASE_MS, worker_id="w1"),
            CorePorts(scheduler=self.scheduler, store=self.store, ladders=self.ladders,
                      calendars=CALS),
            FiringHooks(on_poison=self.on_poison))


def test_an_unknown_ladder_version_is_retried_each_lease_then_dead_lettered() -> None:
    w = World(FakeLadders([LADDER]))
    esc = seed(w.store, w.scheduler, pending_escalation(LADDER, "standard", T0))
    member = str(esc.dispute_id)
    w.scheduler.payloads[member] = esc.with_changes(ladder_version=9)  # no such version
    for attempt in (1, 2):
        assert w.fire().poison == 1
        assert w.queue.dead == {} and w.queue.failures[member] == attempt
        # due again when the claim's lease ends, not before
        assert w.scheduler.scores[member] == to_ms(w.scheduler.now) + LEASE_MS
        w.scheduler.advance(timedelta(milliseconds=LEASE_MS))
    assert w.fire().poison == 1  # the third failure reaches the bound
    assert w.codes == [ErrorCode.LADDER_INVALID] * 3
    [listed] = w.dead.list()
    assert (listed["member"], listed["attempts"]) == (f"decision:{member}", 3)
    assert "dispute_review" in listed["reason"]
    assert member not in w.scheduler.scores  # out of the schedule: never claimed again
    w.scheduler.advance(timedelta(hours=1))
    assert w.fire().claimed == 0
    assert w.store.events(esc.dispute_id) == ["ENQUEUED", "DEAD_LETTERED"]  # never decided


def test_a_broken_released_ladder_file_is_dead_lettered_at_the_first_failure() -> None:
    w = World(BrokenRelease([LADDER]))
    esc = seed(w.store, w.scheduler, pending_escalation(LADDER, "standard", T0))
    assert w.fire().poison == 1
    assert w.codes == [ErrorCode.RELEASE_BROKEN]
    [listed] = w.dead.list()
    assert (listed["member"], listed["attempts"]) == (f"decision:{esc.dispute_id}", 1)
    row = w.store.trail(esc.dispute_id)[-1]
    assert (row.event, row.match_decision) == ("DEAD_LETTERED", "DECISION_DEAD_LETTERED")
