"""Dead letters are capped by count and age, with an alert (docs/reliability.md, "Dead
letters"; ESCALATION_DEAD_LETTER_MAX, ESCALATION_DEAD_LETTER_MAX_AGE_DAYS), on real Redis
and PostgreSQL: the oldest undeliverable notifications over the cap are purged with a PURGED
ledger row each, a dead-lettered escalation is never purged by the cap, and the maintenance
job logs the alert as an ERROR."""

from __future__ import annotations

import json
from typing import Any

import pytest
from structlog.testing import capture_logs

from escalation.adapters.redis_keys import shard_of
from escalation.domain.errors import InvalidInput
from escalation.service_layer.core import CorePorts
from escalation.service_layer.dead_letters import (
    DAY_MS,
    DeadLetterCap,
    DeadLetters,
    cap_dead_letters,
)
from escalation.service_layer.fire import FireDue, FiringHooks, fire_due
from escalation.service_layer.maintenance import alert_dead_letter_cap
from tests.e2e.helpers import due_requests, enqueue
from tests.integration.reliability_support import reliability_redis


def _dead(app: Any) -> DeadLetters:
    return DeadLetters(rel=reliability_redis(app), scheduler=app.scheduler, store=app.store,
                       actor="test", max_decision_attempts=1)


def _notify_dead(app: Any, did: Any, seq: int, age_days: float = 0) -> str:
    """An undeliverable notification of ``did`` dead-lettered ``age_days`` ago."""
    rel = reliability_redis(app)
    member = f"review|{did}:{seq}"
    shard = shard_of(str(did), rel.shards)
    at = rel.dead_letter_notify(shard, member, json.dumps(
        {"kind": "notify", "dispute_id": str(did), "reason": "webhook answered 500"}))
    keys = rel.keys_for(str(did))
    app.redis.zadd(keys.dead, {f"notify:{member}": at - int(age_days * DAY_MS)})
    return f"notify:{member}"


def _poison_dead(app: Any, did: Any, dl: DeadLetters, age_days: float) -> str:
    keys = app.scheduler.keys_for(did)
    app.redis.hset(keys.payload(did), "l", "dispute_review@99")  # ladder version missing
    fire_due(
        FireDue(batch_size=50, lease_ms=1, worker_id="w"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
        FiringHooks(on_poison=dl.on_decision_failed),
    )
    member = f"decision:{did}"
    score = app.redis.zscore(keys.dead, member)
    assert score is not None
    app.redis.zadd(keys.dead, {member: int(score) - int(age_days * DAY_MS)})
    return member


def test_the_cap_purges_the_oldest_notifications_on_record_and_keeps_escalations(
    app: Any,
) -> None:
    ids = enqueue(app, due_requests(5, app.scheduler.time()))
    dl = _dead(app)
    poison = _poison_dead(app, ids[0], dl, age_days=40)  # older than the cap: kept
    ancient = _notify_dead(app, ids[1], 2, age_days=45)   # older than 30 days: purged
    oldest = _notify_dead(app, ids[2], 2, age_days=3)     # over the count cap: purged
    newer = [_notify_dead(app, ids[3], 2, age_days=2), _notify_dead(app, ids[4], 2, 1)]

    report = cap_dead_letters(DeadLetterCap(max_count=3, max_age_days=30), dl)
    assert report.count == 5 and report.decisions == 1 and report.over_cap
    assert report.purged == [ancient, oldest]
    assert report.kept_decisions_over_cap == 1
    assert report.oldest_age_ms is not None and report.oldest_age_ms > 44 * DAY_MS
    left = {item["member"] for item in dl.list()}
    assert left == {poison, *newer}
    for did, member in ((ids[1], ancient), (ids[2], oldest)):  # on record
        (row,) = [r for r in app.store.trail(did) if r.event == "PURGED"]
        assert row.details["member"] == member and "dead-letter cap" in row.details["reason"]
    assert app.store.get(ids[0])[0].status.value == "pending"  # still owed

    again = cap_dead_letters(DeadLetterCap(max_count=3, max_age_days=30), dl)
    assert again.purged == [] and again.over_cap  # the escalation over the age cap remains
    with capture_logs() as logs:
        alert_dead_letter_cap(again)
    (alert,) = [e for e in logs if e["event"] == "maintenance.dead_letters_over_cap"]
    assert alert["log_level"] == "error" and alert["kept_decisions_over_cap"] == 1


def test_within_the_cap_nothing_is_purged_and_no_alert(app: Any) -> None:
    ids = enqueue(app, due_requests(2, app.scheduler.time()))
    dl = _dead(app)
    members = [_notify_dead(app, did, 2, age_days=1) for did in ids]
    report = cap_dead_letters(DeadLetterCap(max_count=2, max_age_days=30), dl)
    assert not report.over_cap and report.purged == []
    assert {i["member"] for i in dl.list()} == set(members)
    with capture_logs() as logs:
        alert_dead_letter_cap(report)
    assert [e["event"] for e in logs] == ["maintenance.dead_letters"]


@pytest.mark.parametrize(("count", "days", "field"), [(0, 30, "max_count"),
                                                      (10, 0, "max_age_days")])
def test_a_cap_out_of_range_is_refused_naming_the_field(count: int, days: int,
                                                        field: str) -> None:
    with pytest.raises(InvalidInput, match=field):
        DeadLetterCap(max_count=count, max_age_days=days)
