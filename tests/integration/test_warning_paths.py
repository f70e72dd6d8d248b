"""Warnings on every path, as fractions of active time, never recorded as on time when late
(cases 5-7 of the deadline review), against the real servers."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from escalation.bootstrap import schedule_for, schedule_resumed, warnings_for
from escalation.domain.timeutil import from_ms
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueOne, EnqueueRequest, enqueue_on_breach
from escalation.service_layer.pause import PauseClock, PausePorts, ResumeClock, pause, resume
from escalation.service_layer.warnings import FireWarnings, WarningPorts, fire_warnings
from tests.helpers import run_cli


class ClockedScheduler:
    """The real scheduler with ``time()`` read from a settable clock (pause/resume tests)."""

    def __init__(self, inner: Any, now: datetime) -> None:
        self._inner = inner
        self.now = now

    def time(self) -> datetime:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _hash(did: uuid.UUID) -> str:
    return hashlib.sha256(did.bytes).hexdigest()


def test_warnings_after_resume_are_fractions_of_active_time(app: Any) -> None:
    # Visa ladder (analyst tier: 10 calendar days). Entered 12-01 15:00Z, paused 12-02
    # 15:00Z after 1 active day, resumed 12-21 15:00Z with 9 days left -> 12-30 15:00Z, but
    # the pre-arbitration deadline does not pause: 30 days from 12-01 end with 12-31 (EST,
    # 2031-01-01 05:00Z), minus the 3-day buffer = 12-29 05:00Z caps it (row names it).
    # 50 % of the active window is 5 days: 4 more days after the resume = 12-25 15:00Z;
    # 75 % = 7.5 days: 6.5 days after = 12-28 03:00Z. (Counting the paused time, the 50 %
    # warning would land on 12-15 and fire the moment the dispute resumes.)
    did = uuid.uuid4()
    entered = datetime(2030, 12, 1, 15, 0, tzinfo=UTC)
    clock = ClockedScheduler(app.scheduler, entered)
    ladder = app.ladders.latest("visa_collaboration_prearb")
    enqueue_on_breach(
        EnqueueOne(
            request=EnqueueRequest(dispute_id=did, materiality="10.00", source_hash=_hash(did),
                       ladder=ladder.name, opened_at=entered),
                   actor="t", default_ladder="dispute_review"),
        CorePorts(scheduler=clock, store=app.store, ladders=app.ladders, calendars=app.calendars),
        schedule_for(app),
    )
    clock.now = datetime(2030, 12, 2, 15, 0, tzinfo=UTC)
    ports = PausePorts(clock, app.store, app.ladders, app.calendars)
    paused = pause(PauseClock(did, "t", "waiting for cardholder"), ports)
    assert paused.consumed_ms == 86_400_000
    clock.now = datetime(2030, 12, 21, 15, 0, tzinfo=UTC)
    res = resume(ResumeClock(did, "t"), ports)
    assert res.escalation.due_at == datetime(2030, 12, 29, 5, 0, tzinfo=UTC)
    assert schedule_resumed(app, res) == 2
    pending = {member.rsplit(":", 1)[1]: from_ms(ms)
               for member, ms in warnings_for(app).pending(did)
               if member.split(":")[1] == str(res.escalation.seq)}
    assert pending == {"0.50": datetime(2030, 12, 25, 15, 0, tzinfo=UTC),
                       "0.75": datetime(2030, 12, 28, 3, 0, tzinfo=UTC)}
    resumed_row = app.store.trail(did)[-1]
    assert resumed_row.details["consumed_ms"] == 86_400_000
    assert resumed_row.details["window_ms"] == 10 * 86_400_000
    assert resumed_row.details["deadline"]["name"] == "pre_arbitration_filing"
    assert resumed_row.details["deadline"]["capped"] is True


def test_import_schedules_pre_breach_warnings(cli_env: dict[str, str], app: Any,
                                              tmp_path: Path) -> None:
    did = uuid.uuid4()
    opened = (app.scheduler.time() - timedelta(hours=1)).isoformat()
    csv_path = tmp_path / "disputes.csv"
    csv_path.write_text(f"dispute_id,opened\n{did},{opened}\n")
    res = run_cli(
        cli_env, "import", str(csv_path), "--opened-column",
        "opened", "--ladder", "dispute_review")
    assert res.returncode == 0, res.stderr[-2000:]
    fractions = sorted(member.rsplit(":", 1)[1] for member, _ in warnings_for(app).pending(did))
    assert fractions == ["0.50", "0.75"]


def test_a_warning_scheduled_after_its_instant_is_recorded_late_with_its_intended_time(
    app: Any,
) -> None:
    # Due 11-06 (24 h standard tier entered 11-05), enqueued on 11-30: the 50 % (11-05 12:00)
    # and 75 % (11-05 18:00) warnings were due weeks before; each WARNING row says late, by
    # how much, and when it was meant to fire.
    did = uuid.uuid4()
    opened = datetime(2026, 11, 5, 0, 0, tzinfo=UTC)
    now = app.scheduler.time()
    enqueue_on_breach(
        EnqueueOne(
            request=EnqueueRequest(dispute_id=did, materiality="10.00", source_hash=_hash(did),
                       opened_at=opened),
                   actor="t", default_ladder="dispute_review"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
        schedule_for(app),
    )
    report = fire_warnings(FireWarnings("w"), WarningPorts(
        warnings_for(app), app.scheduler, app.store, app.ladders, app.calendars))
    assert report.recorded >= 1
    rows = [r for r in app.store.trail(did) if r.event == "WARNING"]
    assert rows
    intended = {"0.50": datetime(2026, 11, 5, 12, 0, tzinfo=UTC),
                "0.75": datetime(2026, 11, 5, 18, 0, tzinfo=UTC)}
    for row in rows:
        assert row.details["late"] is True
        assert datetime.fromisoformat(row.details["intended_at"]) == intended[
            row.details["fraction"]]
        assert row.details["late_by_ms"] >= (now - intended[row.details["fraction"]]) // \
            timedelta(milliseconds=1) - 60_000


def test_an_on_time_warning_is_recorded_on_time(app: Any) -> None:
    did = uuid.uuid4()
    now = app.scheduler.time()
    enqueue_on_breach(
        EnqueueOne(
            request=EnqueueRequest(dispute_id=did, materiality="10.00", source_hash=_hash(did),
                       opened_at=now - timedelta(hours=12, seconds=-1)),
                   actor="t", default_ladder="dispute_review"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
        schedule_for(app),
    )
    import time

    time.sleep(1.2)
    fire_warnings(FireWarnings("w"), WarningPorts(
        warnings_for(app), app.scheduler, app.store, app.ladders, app.calendars))
    (row,) = [r for r in app.store.trail(did) if r.event == "WARNING"]
    assert row.details["late"] is False and row.details["late_by_ms"] < 60_000


def test_migration_hook_schedules_only_warnings_still_ahead(app: Any) -> None:
    did = uuid.uuid4()
    res = enqueue_on_breach(
        EnqueueOne(
            request=EnqueueRequest(dispute_id=did, materiality="10.00", source_hash=_hash(did),
                       opened_at=app.scheduler.time() - timedelta(hours=13)),
                   actor="t", default_ladder="dispute_review"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )
    schedule_for(app, only_ahead=True)([res.escalation])  # 50 % (12 h) passed, 75 % ahead
    assert [m.rsplit(":", 1)[1] for m, _ in warnings_for(app).pending(did)] == ["0.75"]
