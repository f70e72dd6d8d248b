"""Pre-breach warnings against the real servers (docs/sla.md, "Warnings before breach")."""

from __future__ import annotations

import hashlib
import uuid
from datetime import timedelta
from typing import Any

from escalation.adapters.redis_warnings import WarningMember
from escalation.bootstrap import schedule_for, warnings_for
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueOne, EnqueueRequest, enqueue_on_breach
from escalation.service_layer.warnings import FireWarnings, WarningPorts, fire_warnings


def _enqueue(app: Any, opened_hours_ago: float) -> uuid.UUID:
    did = uuid.uuid4()
    now = app.scheduler.time()
    enqueue_on_breach(
        EnqueueOne(request=EnqueueRequest(dispute_id=did, materiality="10.00",
                       source_hash=hashlib.sha256(did.bytes).hexdigest(),
                       opened_at=now - timedelta(hours=opened_hours_ago)),
                   actor="test", default_ladder="dispute_review"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
        schedule_for(app),
    )
    return did


def _fire(app: Any) -> Any:
    return fire_warnings(FireWarnings("w"), WarningPorts(
        warnings_for(app), app.scheduler, app.store, app.ladders, app.calendars))


def test_due_warning_is_recorded_once_and_streamed(app: Any) -> None:
    did = _enqueue(app, opened_hours_ago=13)  # 24h tier: the 50% warning (12h) is due
    assert len(warnings_for(app).pending(did)) == 2
    report = _fire(app)
    assert report.recorded == 1
    rows = app.store.trail(did)
    assert [r.event for r in rows] == ["ENQUEUED", "WARNING"]
    assert rows[-1].details["fraction"] == "0.50"
    assert app.scheduler.payload(did)["seq"] == "2"  # Redis follows the new seq
    stream = app.redis.xrange(app.scheduler.keys_for(did).review)
    assert [e[1]["idempotency_key"] for e in stream] == [f"{did}:1:warn:0.50"]
    # the same warning scheduled again is dropped as a duplicate
    warnings_for(app).schedule([WarningMember(did, 1, "0.50", 0)])
    assert _fire(app).duplicate == 1
    assert [r.event for r in app.store.trail(did)] == ["ENQUEUED", "WARNING"]


def test_warning_is_not_sent_after_the_escalation_moved_on(app: Any) -> None:
    from escalation.service_layer.cancel import cancel

    did = _enqueue(app, opened_hours_ago=13)
    cancel(did, scheduler=app.scheduler, store=app.store, actor="t", reason="resolved")
    report = _fire(app)
    assert report.recorded == 0 and report.moved_on == 1
    assert app.redis.xlen(app.scheduler.keys_for(did).review) == 0
