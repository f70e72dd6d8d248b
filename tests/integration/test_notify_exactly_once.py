"""Every recorded decision gets exactly one review-stream notification, whichever path
applies it: the worker, the worker's stale-claim repair, reconcile, or a cancel landing
between record and apply."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from escalation.service_layer.cancel import cancel
from escalation.service_layer.core import CorePorts
from escalation.service_layer.fire import FireDue, FiringHooks, fire_due
from escalation.service_layer.reconcile import FullReconcile, ReconcilePorts, reconcile
from tests.e2e.helpers import due_requests, enqueue
from tests.integration import reliability_support as support
from tests.integration.reliability_support import reliability_redis

own_database_url = support.own_database_url  # fixtures
own_app = support.own_app

LEASE_MS = 300


class Killed(Exception):
    """Stands in for SIGKILL at a crash point."""


def _kill_at(point: str) -> Any:
    def hook(name: str) -> None:
        if name == point:
            raise Killed(name)
    return hook


def _fire(app: Any, crashpoint: Any = None) -> Any:
    return fire_due(
        FireDue(batch_size=100, lease_ms=LEASE_MS, worker_id="w"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
        FiringHooks(crashpoint=crashpoint),
    )


_IDS: list[Any] = []


def _notes(app: Any) -> Counter[str]:
    stream = app.scheduler.keys_for(_IDS[0]).review  # one shard: one review stream
    return Counter(f["idempotency_key"] for _, f in app.redis.xrange(stream))


def _decisions(app: Any, ids: list[Any]) -> Counter[str]:
    keys: Counter[str] = Counter()
    for did in ids:
        for row in app.store.trail(did):
            if row.match_decision.startswith("PROMOTED_") or \
                    row.match_decision == "TERMINAL_ESCALATION":
                keys[f"{row.dispute_id}:{row.seq}"] += 1
    return keys


def _recorded_not_applied(app: Any, n: int) -> list[Any]:
    ids = enqueue(app, due_requests(n, app.scheduler.time()))
    _IDS[:] = ids
    with pytest.raises(Killed):
        _fire(app, _kill_at("after_record"))
    assert sum(_decisions(app, ids).values()) == n and _notes(app) == Counter()
    time.sleep(LEASE_MS / 1000 + 0.2)  # the dead worker's lease runs out
    return ids


def test_crash_after_record_then_reconcile_notifies_each_decision_once(own_app: Any) -> None:
    ids = _recorded_not_applied(own_app, 20)
    report = reconcile(FullReconcile(False),
                       ReconcilePorts(own_app.scheduler, own_app.store, reliability_redis(own_app)))
    assert report.count(repaired=True) == 20
    decided = _decisions(own_app, ids)
    assert _notes(own_app) == decided
    # the members are due again; a worker now decides the next tier: one new notification
    # each, and the repaired decisions are not sent again; reconcile again changes nothing
    _fire(own_app)
    reconcile(FullReconcile(False),
              ReconcilePorts(own_app.scheduler, own_app.store, reliability_redis(own_app)))
    notes = _notes(own_app)
    assert set(notes.values()) == {1}
    assert notes == _decisions(own_app, ids)


def test_crash_after_record_then_worker_notifies_each_decision_once(own_app: Any) -> None:
    ids = _recorded_not_applied(own_app, 20)
    _fire(own_app)  # stale claims: PostgreSQL ahead of Redis -> apply with the notification
    _fire(own_app)
    assert _notes(own_app) == _decisions(own_app, ids)
    assert set(_notes(own_app).values()) == {1}


def test_a_cancel_between_record_and_apply_still_notifies_the_promotion_once(
    own_app: Any,
) -> None:
    ids = _recorded_not_applied(own_app, 5)
    for did in ids:
        cancel(did, scheduler=own_app.scheduler, store=own_app.store, actor="t", reason="r")
    assert _notes(own_app) == _decisions(own_app, ids)
    # nothing left to fire or repair; nothing is sent twice
    _fire(own_app)
    reconcile(FullReconcile(False),
              ReconcilePorts(own_app.scheduler, own_app.store, reliability_redis(own_app)))
    assert _notes(own_app) == _decisions(own_app, ids)
    assert set(_notes(own_app).values()) == {1}
