"""Pause / resume against the real servers (docs/sla.md, "Pause / resume")."""

from __future__ import annotations

import hashlib
import uuid
from datetime import timedelta
from typing import Any

import pytest

from escalation.domain.errors import ConflictError
from escalation.domain.escalation import Status
from escalation.service_layer.cancel import cancel
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueOne, EnqueueRequest, enqueue_on_breach
from escalation.service_layer.fire import FireDue, fire_due
from escalation.service_layer.pause import PauseClock, PausePorts, ResumeClock, pause, resume


def _enqueue(app: Any, hours: float = 10, ladder: str | None = None) -> uuid.UUID:
    did = uuid.uuid4()
    now = app.scheduler.time()
    enqueue_on_breach(
        EnqueueOne(request=EnqueueRequest(dispute_id=did, materiality="100.00",
                       source_hash=hashlib.sha256(str(did).encode()).hexdigest(),
                       due_at=now + timedelta(hours=hours), ladder=ladder),
                   actor="test", default_ladder=app.settings.default_ladder),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )
    return did


def _ports(app: Any) -> PausePorts:
    return PausePorts(app.scheduler, app.store, app.ladders, app.calendars)


def _members(app: Any) -> set[str]:
    return {m for m, _ in app.scheduler.pending_members(0)}


def test_pause_takes_member_off_schedule_and_records_remaining(app: Any) -> None:
    did = _enqueue(app, hours=10)
    res = pause(PauseClock(did, "test", "waiting for cardholder"), _ports(app))
    assert res.escalation.status is Status.PAUSED
    assert 10 * 3_600_000 - 60_000 < res.remaining_ms <= 10 * 3_600_000
    assert str(did) not in _members(app)
    assert app.scheduler.payload(did)["seq"] == "2"  # payload kept with the PAUSED seq
    rows = app.store.trail(did)
    assert [r.event for r in rows] == ["ENQUEUED", "PAUSED"]
    assert rows[-1].details["remaining_ms"] == res.remaining_ms
    assert rows[-1].details["reason"] == "waiting for cardholder"
    assert rows[-1].calendar_version == "utc@UTC:1"  # names the calendar and zone


def test_resume_reschedules_at_now_plus_remaining(app: Any) -> None:
    did = _enqueue(app, hours=10)
    paused = pause(PauseClock(did, "test", "x"), _ports(app))
    before = app.scheduler.time()
    res = resume(ResumeClock(did, "test"), _ports(app))
    after = app.scheduler.time()
    due = res.escalation.due_at
    assert before + timedelta(milliseconds=paused.remaining_ms) <= due
    assert due <= after + timedelta(milliseconds=paused.remaining_ms)
    scores = dict(app.scheduler.pending_members(0))
    assert scores[str(did)] == int(due.timestamp() * 1000)
    assert [r.event for r in app.store.trail(did)] == ["ENQUEUED", "PAUSED", "RESUMED"]
    assert app.store.get(did)[1] is Status.PENDING


def test_pausing_twice_is_a_conflict(app: Any) -> None:
    did = _enqueue(app)
    pause(PauseClock(did, "test", "x"), _ports(app))
    with pytest.raises(ConflictError, match="already paused"):
        pause(PauseClock(did, "test", "again"), _ports(app))


def test_resuming_a_pending_escalation_is_a_conflict(app: Any) -> None:
    did = _enqueue(app)
    with pytest.raises(ConflictError, match="not paused"):
        resume(ResumeClock(did, "test"), _ports(app))


def test_cancelling_a_paused_escalation_removes_it(app: Any) -> None:
    did = _enqueue(app)
    pause(PauseClock(did, "test", "x"), _ports(app))
    cancel(did, scheduler=app.scheduler, store=app.store, actor="test", reason="resolved")
    assert app.store.get(did)[1] is Status.CANCELLED
    assert app.scheduler.payload(did) is None
    with pytest.raises(ConflictError):
        resume(ResumeClock(did, "test"), _ports(app))


def test_paused_escalation_does_not_fire_while_a_worker_held_its_claim(app: Any) -> None:
    did = _enqueue(app, hours=-1)  # already due
    claim = app.scheduler.claim(10, 5000, "w1")
    assert [i.escalation.dispute_id for i in claim.items] == [did]
    pause(PauseClock(did, "test", "x"), _ports(app))  # owner-less park while w1 holds the lock
    # w1 goes on with its batch: record sees the pause (STALE) and nothing fires.
    from escalation.domain.decide import decide
    item = claim.items[0]
    ladder = app.ladders.get(item.escalation.ladder, item.escalation.ladder_version)
    outcome = app.store.record_decisions(
        [(item, decide(item.escalation, ladder, claim.now, app.calendars))], "w1")[0]
    assert outcome.state.status is Status.PAUSED
    assert [r.event for r in app.store.trail(did)] == ["ENQUEUED", "PAUSED"]
    report = fire_due(
        FireDue(batch_size=10, lease_ms=5000, worker_id="w2"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )
    assert report.recorded == 0
    assert str(did) not in _members(app)


def test_business_hours_pause_keeps_open_time_not_elapsed_time(app: Any) -> None:
    # Friday 16:00 New York to Monday 10:00: 2 open hours, 66 elapsed hours.
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from escalation.domain.calendars import US_FEDERAL_RESERVE
    from escalation.domain.sla_timing import advance_open_ms, open_ms_between
    ny = ZoneInfo("America/New_York")
    fri = datetime(2025, 3, 7, 16, 0, tzinfo=ny)
    mon = datetime(2025, 3, 10, 10, 0, tzinfo=ny)
    assert open_ms_between(US_FEDERAL_RESERVE, fri, mon) == 2 * 3_600_000
    assert advance_open_ms(US_FEDERAL_RESERVE, fri, 2 * 3_600_000) == mon
