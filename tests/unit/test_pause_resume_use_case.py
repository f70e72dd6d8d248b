"""``pause`` and ``resume`` (service_layer.pause) on the in-memory fakes: the remaining window
is kept and given back, Redis parks then re-schedules the member, and every refusal writes
nothing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from escalation.domain.calendars import SlaWindow, WindowUnit, builtin_calendars
from escalation.domain.errors import ConflictError, InvalidInput, NotFound
from escalation.domain.escalation import Status
from escalation.domain.ladder import Ladder, Tier
from escalation.domain.timeutil import to_ms
from escalation.ports import ApplyOutcome
from escalation.service_layer.pause import (
    PauseClock,
    PausePorts,
    ResumeClock,
    pause,
    paused_remaining,
    resume,
)
from tests.fakes import FakeAuditLog, FakeLadders, FakeScheduler, pending, seed

CALS = builtin_calendars()
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
LADDER = Ladder(
    name="dispute_review", version=1,
    tiers=(Tier("standard", "Standard", 10, SlaWindow(24, WindowUnit.CALENDAR_HOURS)),
           Tier("senior", "Senior", 20, SlaWindow(48, WindowUnit.CALENDAR_HOURS))),
    terminal_tier="senior")


class World:
    """A scheduler (clock at ``T0``), an audit log and one ladder."""

    def __init__(self) -> None:
        self.scheduler = FakeScheduler(now=T0)
        self.store = FakeAuditLog()
        self.ladders = FakeLadders([LADDER])

    def seed(self, due: datetime) -> uuid.UUID:
        esc = pending(LADDER, "standard", due, entered_tier_at=due - timedelta(hours=24))
        return seed(self.store, self.scheduler, esc).dispute_id

    def pause(self, did: object, reason: str = "waiting for the cardholder"):  # type: ignore[no-untyped-def]
        return pause(PauseClock(did, "jane", reason),
                     PausePorts(self.scheduler, self.store, self.ladders, CALS))

    def resume(self, did: object):  # type: ignore[no-untyped-def]
        return resume(ResumeClock(did, "jane"),
                      PausePorts(self.scheduler, self.store, self.ladders, CALS))


def test_pause_keeps_the_remaining_window_and_parks_the_member() -> None:
    w = World()
    did = w.seed(T0 + timedelta(hours=6))  # entered 18 h ago, 6 h of 24 h left

    got = w.pause(did)

    assert got.escalation.status is Status.PAUSED and got.escalation.seq == 2
    assert got.remaining_ms == 6 * 3_600_000 and got.basis == "elapsed"
    assert got.consumed_ms == 18 * 3_600_000 and got.at == T0
    assert got.redis is ApplyOutcome.APPLIED
    assert str(did) not in w.scheduler.scores  # off the ZSET: it cannot fire
    assert w.scheduler.payloads[str(did)].seq == 2  # the payload is kept
    row = w.store.trail(did)[-1]
    assert row.event == "PAUSED" and row.details["reason"] == "waiting for the cardholder"
    assert paused_remaining(w.store, did) == (6 * 3_600_000, "elapsed")


def test_resume_gives_back_the_remaining_window_from_now() -> None:
    w = World()
    did = w.seed(T0 + timedelta(hours=6))
    w.pause(did)
    w.scheduler.advance(timedelta(days=3))  # paused for three days: the clock stood still

    got = w.resume(did)

    due = T0 + timedelta(days=3, hours=6)
    assert got.escalation.status is Status.PENDING and got.escalation.due_at == due
    assert got.escalation.seq == 3 and got.redis is ApplyOutcome.APPLIED
    assert w.scheduler.scores[str(did)] == to_ms(due)
    assert w.store.events(did) == ["ENQUEUED", "PAUSED", "RESUMED"]
    assert w.store.trail(did)[-1].details["window_ms"] == 24 * 3_600_000


def test_a_second_pause_counts_the_time_used_before_the_first() -> None:
    w = World()
    did = w.seed(T0 + timedelta(hours=6))
    w.pause(did)
    w.scheduler.advance(timedelta(days=1))
    w.resume(did)
    w.scheduler.advance(timedelta(hours=2))  # two more hours of the window used
    got = w.pause(did)
    assert got.remaining_ms == 4 * 3_600_000 and got.consumed_ms == 20 * 3_600_000


def test_pause_refuses_a_paused_or_ended_escalation_and_resume_a_pending_one() -> None:
    w = World()
    did = w.seed(T0 + timedelta(hours=6))
    with pytest.raises(ConflictError, match="not paused"):
        w.resume(did)
    w.pause(did)
    rows = len(w.store.ledger)
    with pytest.raises(ConflictError, match="already paused"):
        w.pause(did)
    assert len(w.store.ledger) == rows
    state = w.store.states[did]
    w.store.append(state, "CANCELLED", "a", T0, status=Status.CANCELLED)
    with pytest.raises(ConflictError, match="cancelled"):
        w.resume(did)


@pytest.mark.parametrize(("dispute", "reason", "field"), [
    ("nope", "ok", "dispute"), (None, " ", "reason"), (None, "a\x00b", "reason")])
def test_bad_input_is_refused_naming_the_field_and_nothing_is_written(
    dispute: str | None, reason: str, field: str,
) -> None:
    w = World()
    did = w.seed(T0 + timedelta(hours=6))
    before = (list(w.store.ledger), dict(w.scheduler.scores))
    with pytest.raises(InvalidInput, match=field):
        w.pause(dispute or did, reason=reason)
    assert (w.store.ledger, w.scheduler.scores) == before


def test_an_unknown_dispute_is_not_found() -> None:
    w = World()
    with pytest.raises(NotFound):
        w.pause(uuid.uuid4())
    with pytest.raises(NotFound):
        w.resume(uuid.uuid4())
    assert w.store.ledger == []
