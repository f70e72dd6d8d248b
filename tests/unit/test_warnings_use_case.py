"""Pre-breach warnings (service_layer.warnings) on the in-memory fakes: the instants computed
from the tier's SLA window and scheduled once, a due warning recorded and notified once, and
nothing for an escalation that moved on. The real-server runs are
tests/integration/test_apply_warnings.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from uuid import UUID

from escalation.domain.calendars import SlaWindow, WindowUnit, builtin_calendars
from escalation.domain.escalation import Status
from escalation.domain.ladder import Ladder, Tier
from escalation.domain.timeutil import to_ms
from escalation.ports import WarningMember
from escalation.service_layer.warnings import (
    FireWarnings,
    WarningPorts,
    WarningReport,
    fire_warnings,
    schedule_warnings,
)
from tests.fakes import FakeAuditLog, FakeLadders, FakeScheduler, FakeWarningQueue, pending, seed

CALS = builtin_calendars()
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # the escalation enters its tier
LADDER = Ladder(
    name="dispute_review", version=1,
    tiers=(Tier("standard", "Standard", 10, SlaWindow(24, WindowUnit.CALENDAR_HOURS),
                warn_at=(Decimal("0.50"), Decimal("0.75"))),
           Tier("senior", "Senior", 20, SlaWindow(48, WindowUnit.CALENDAR_HOURS))),
    terminal_tier="senior")
# The standard tier's window is 24 calendar hours from T0 (breach 2026-03-03 12:00 UTC):
# 0.50 of it is 12 h in, 2026-03-03 00:00 UTC; 0.75 is 18 h in, 2026-03-03 06:00 UTC.
AT_50 = datetime(2026, 3, 3, 0, 0, tzinfo=UTC)
AT_75 = datetime(2026, 3, 3, 6, 0, tzinfo=UTC)


class World:
    """A scheduler (clock at ``T0``), its warnings queue, an audit log and one ladder."""

    def __init__(self) -> None:
        self.scheduler = FakeScheduler(now=T0)
        self.queue = FakeWarningQueue(self.scheduler)
        self.log = FakeAuditLog()
        self.ladders = FakeLadders([LADDER])

    def enqueue(self, tier: str = "standard") -> UUID:
        """Record and schedule one escalation entering ``tier`` at T0, and its warnings."""
        window = 24 if tier == "standard" else 48
        esc = pending(LADDER, tier, T0 + timedelta(hours=window), entered_tier_at=T0)
        state = seed(self.log, self.scheduler, esc, T0)
        schedule_warnings([state], warnings=self.queue, ladders=self.ladders, calendars=CALS)
        return state.dispute_id

    def fire_at(self, at: datetime) -> WarningReport:
        self.scheduler.now = at
        return fire_warnings(FireWarnings("worker-a"), WarningPorts(
            self.queue, self.scheduler, self.log, self.ladders, CALS))

    def warnings(self, did: UUID) -> list[dict[str, object]]:
        return [r.details for r in self.log.trail(did) if r.event == "WARNING"]


def test_warning_instants_come_from_the_tiers_window_and_are_scheduled_once() -> None:
    w = World()
    did = w.enqueue()
    assert w.queue.members == {f"{did}:1:0.50": to_ms(AT_50), f"{did}:1:0.75": to_ms(AT_75)}
    # scheduling the same tier entry again (a retried enqueue) adds nothing
    state = w.log.states[did]
    assert schedule_warnings([state], warnings=w.queue, ladders=w.ladders, calendars=CALS) == 0
    assert len(w.queue.members) == 2


def test_a_tier_without_warn_at_or_an_escalation_not_pending_schedules_none() -> None:
    w = World()
    w.enqueue("senior")
    assert w.queue.members == {}
    did = w.enqueue()
    w.queue.members.clear()
    ended = w.log.append(w.log.states[did], "CANCELLED", "jane", T0, status=Status.CANCELLED)
    assert schedule_warnings([ended], warnings=w.queue, ladders=w.ladders, calendars=CALS) == 0


def test_nothing_fires_before_the_instant() -> None:
    w = World()
    did = w.enqueue()
    report = w.fire_at(AT_50 - timedelta(milliseconds=1))
    assert (report.claimed, report.recorded, report.next_due_ms) == (0, 0, to_ms(AT_50))
    assert w.warnings(did) == []


def test_a_due_warning_is_recorded_and_notified_once() -> None:
    w = World()
    did = w.enqueue()
    report = w.fire_at(AT_50)
    assert (report.claimed, report.recorded, report.notified) == (1, 1, 1)
    assert report.recorded_keys == [f"{did}:1:0.50"]
    assert report.next_due_ms == to_ms(AT_75)  # the worker's next pass
    [row] = [r for r in w.log.trail(did) if r.event == "WARNING"]
    assert (row.seq, row.match_decision) == (2, "SLA_WARNING_50")
    assert row.details == {"tier_seq": 1, "fraction": "0.50", "tier": "standard",
                           "due_at": (T0 + timedelta(hours=24)).isoformat(),
                           "intended_at": AT_50.isoformat(), "late_by_ms": 0, "late": False}
    # the Redis payload follows the ledger (seq 2), with one review-stream entry
    assert w.scheduler.payloads[str(did)].seq == 2
    assert [e["idempotency_key"] for e in w.scheduler.review] == [f"{did}:1:warn:0.50"]
    assert w.scheduler.scores[str(did)] == to_ms(T0 + timedelta(hours=24))  # due unchanged

    # a second pass at the same instant claims nothing; the same member scheduled again
    # (e.g. a re-run of the tier's scheduling) is claimed and dropped as a duplicate
    assert w.fire_at(AT_50).claimed == 0
    w.queue.schedule([WarningMember(did, 1, "0.50", to_ms(AT_50))])
    again = w.fire_at(AT_50)
    assert (again.claimed, again.recorded, again.duplicate) == (1, 0, 1)
    assert len(w.warnings(did)) == 1 and len(w.scheduler.review) == 1

    # the 0.75 warning of the same tier entry still fires after the 0.50 one
    later = w.fire_at(AT_75)
    assert (later.recorded, later.moved_on) == (1, 0)
    assert [d["fraction"] for d in w.warnings(did)] == ["0.50", "0.75"]


def test_a_warning_recorded_after_its_instant_says_how_late() -> None:
    w = World()
    did = w.enqueue()
    w.fire_at(AT_50 + timedelta(minutes=2))  # a worker outage: 120 000 ms after the instant
    [details] = w.warnings(did)
    assert (details["late_by_ms"], details["late"]) == (120_000, True)


def test_nothing_fires_for_an_escalation_that_moved_on() -> None:
    w = World()
    promoted = w.enqueue()
    w.log.append(w.log.states[promoted], "PROMOTED", "worker-b", AT_50 - timedelta(hours=1),
                 tier="senior", entered_tier_at=AT_50 - timedelta(hours=1))
    cancelled = w.enqueue()
    w.log.append(w.log.states[cancelled], "CANCELLED", "jane", T0, status=Status.CANCELLED)
    report = w.fire_at(AT_75)  # both fractions of both are due
    assert (report.claimed, report.recorded, report.moved_on) == (4, 0, 4)
    assert w.warnings(promoted) == [] and w.warnings(cancelled) == []
    assert w.scheduler.review == []


def test_an_action_that_leaves_the_due_time_keeps_the_warnings() -> None:
    w = World()
    did = w.enqueue()
    w.log.append(w.log.states[did], "ACTION_RECORDED", "jane", T0 + timedelta(hours=1),
                 details={"action": "provisional_credit"})
    report = w.fire_at(AT_50)
    # recorded against the projection's seq 3, keyed by the tier entry (seq 1)
    assert (report.recorded, report.moved_on) == (1, 0)
    assert w.warnings(did)[0]["tier_seq"] == 1
