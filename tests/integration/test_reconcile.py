"""Reconcile: PostgreSQL is the truth; Redis is repaired from it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from escalation.domain.escalation import Status
from escalation.domain.timeutil import to_ms
from escalation.ports import LedgerEvent
from escalation.service_layer.reconcile import (
    DiffKind,
    FullReconcile,
    ReconcileHooks,
    ReconcilePorts,
    reconcile,
)
from tests.e2e.helpers import due_requests, enqueue
from tests.helpers import run_cli
from tests.integration import reliability_support as support
from tests.integration.reliability_support import delete_namespace, reliability_redis

own_database_url = support.own_database_url  # fixtures
own_app = support.own_app


def _run(app: Any, dry_run: bool = False) -> Any:
    return reconcile(FullReconcile(dry_run),
                     ReconcilePorts(app.scheduler, app.store, reliability_redis(app)))


def _pg_pending(app: Any) -> dict[str, int]:
    rows = app.store.pending_page(None, 10000)
    return {str(e.dispute_id): to_ms(e.due_at) for e in rows}


def _zset(app: Any) -> dict[str, int]:
    return dict(app.scheduler.pending_members(0))


def test_reconcile_restores_every_pending_escalation_with_its_due_time_after_namespace_wipe(
    own_app: Any,
) -> None:
    now = own_app.scheduler.time()
    enqueue(own_app, due_requests(150, now, past_s=-3600))  # due in an hour
    enqueue(own_app, due_requests(50, now, past_s=30))  # already due
    truth = _pg_pending(own_app)
    assert len(truth) == 200
    assert delete_namespace(own_app.redis, own_app.settings.namespace) > 0
    assert _zset(own_app) == {}

    dry = _run(own_app, dry_run=True)
    assert dry.count(DiffKind.MISSING) == 200
    assert _zset(own_app) == {}  # dry run wrote nothing

    calls: list[tuple[str, int, int | None]] = []
    report = reconcile(
        FullReconcile(page=64),
        ReconcilePorts(own_app.scheduler, own_app.store, reliability_redis(own_app)),
        ReconcileHooks(lambda phase, done, total: calls.append((phase, done, total))))
    assert report.count(DiffKind.MISSING, repaired=True) == 200
    assert [c for c in calls if c[0] == "postgres"][-1] == ("postgres", 200, None)
    assert len([c for c in calls if c[0] == "postgres"]) == 4  # one per page of 64
    assert report.summary() == ("reconcile: checked 200 rows and 200 members, "
                                "200 difference(s), 200 repaired, 0 error(s)")
    assert _zset(own_app) == truth  # 100% restored, scores == PostgreSQL due_at in ms
    for did in list(truth)[:5]:
        assert own_app.scheduler.payload(did)["seq"] == "1"
    assert _run(own_app).diffs == []  # idempotent: nothing left to repair


def test_reconcile_removes_unknown_and_terminal_members_and_reapplies_stale_payloads(
    own_app: Any,
) -> None:
    now = own_app.scheduler.time()
    ids = enqueue(own_app, due_requests(3, now, past_s=-600))
    stale, cancelled, lost_member = ids
    r = own_app.redis
    keys = own_app.scheduler.keys_for(stale)
    # a payload behind PostgreSQL: PostgreSQL moved on (a WARNING row bumps seq)
    own_app.store.append_event(LedgerEvent(stale, "WARNING", "TEST", "t", now, {}, {}))
    # cancelled in PostgreSQL, still in Redis (crash between record and apply)
    own_app.store.record_cancel(cancelled, "t", now, "resolved")
    # member lost from the ZSET, payload kept
    r.zrem(keys.pending, str(lost_member))
    # a member nobody knows
    unknown = str(uuid.uuid4())
    r.zadd(keys.pending, {unknown: 1, "not-a-uuid": 2})

    report = _run(own_app)
    kinds = {(d.kind, d.dispute_id): d.repaired for d in report.diffs}
    assert kinds[(DiffKind.BEHIND, str(stale))] is True
    assert kinds[(DiffKind.TERMINAL_MEMBER, str(cancelled))] is True
    assert kinds[(DiffKind.MISSING_MEMBER, str(lost_member))] is True
    assert kinds[(DiffKind.UNKNOWN_MEMBER, unknown)] is True
    assert kinds[(DiffKind.UNKNOWN_MEMBER, "not-a-uuid")] is True
    assert own_app.scheduler.payload(stale)["seq"] == "2"
    assert own_app.scheduler.payload(cancelled) is None
    assert _zset(own_app) == _pg_pending(own_app)


def test_reconcile_leaves_a_locked_member_to_its_worker(own_app: Any) -> None:
    now = own_app.scheduler.time()
    (did,) = enqueue(own_app, due_requests(1, now, past_s=-600))
    keys = own_app.scheduler.keys_for(did)
    own_app.store.append_event(LedgerEvent(did, "WARNING", "TEST", "t", now, {}, {}))
    own_app.redis.set(keys.lock(did), "7:other-worker", px=60_000)
    report = _run(own_app)
    assert [d.kind for d in report.diffs] == [DiffKind.LOCKED]
    assert own_app.scheduler.payload(did)["seq"] == "1"  # untouched while locked


def test_reconcile_takes_a_paused_member_out_of_the_zset_and_keeps_its_payload(
    own_app: Any,
) -> None:
    now = own_app.scheduler.time()
    (did,) = enqueue(own_app, due_requests(1, now, past_s=-600))
    own_app.store.append_event(LedgerEvent(did, "PAUSED", "PAUSED", "t", now,
                               {"status": Status.PAUSED}, {}))
    report = _run(own_app)  # payload behind: restore parks it (ZREM, payload at new seq)
    assert report.count(DiffKind.BEHIND, repaired=True) == 1
    assert _zset(own_app) == {}
    assert own_app.scheduler.payload(did)["seq"] == "2"


def _corrupt_due(app: Any, did: Any) -> None:
    """Give one escalation a due time Redis refuses (before 1970: negative epoch ms)."""
    import sqlalchemy as sa

    with app.engine.begin() as conn:
        conn.execute(sa.text("UPDATE escalation_state SET due_at = '1960-01-01T00:00:00Z' "
                             "WHERE dispute_id = :d"), {"d": did})


def test_reconcile_reports_an_item_redis_refuses_and_repairs_the_others(own_app: Any) -> None:
    now = own_app.scheduler.time()
    ids = enqueue(own_app, due_requests(5, now, past_s=-600))
    _corrupt_due(own_app, ids[2])
    delete_namespace(own_app.redis, own_app.settings.namespace)

    report = _run(own_app)
    assert [i for i, _ in report.errors] == [str(ids[2])]
    assert "bad due_ms" in report.errors[0][1]
    assert report.count(DiffKind.MISSING, repaired=True) == 4
    assert set(_zset(own_app)) == {str(d) for d in ids} - {str(ids[2])}
    assert report.as_dict()["errors"] == 1


def test_reconcile_cli_continues_past_an_edited_projection_row_and_exits_1_naming_it(
    own_app: Any, own_database_url: str, redis_url: str
) -> None:
    """A projection row whose due time the ledger does not hold (here one Redis would refuse,
    before 1970) is named with its column, left out of the Redis repair, and the others are
    repaired; exit 1, one summary line, no traceback."""
    import os

    now = own_app.scheduler.time()
    ids = enqueue(own_app, due_requests(3, now, past_s=-600))
    _corrupt_due(own_app, ids[0])
    delete_namespace(own_app.redis, own_app.settings.namespace)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=own_database_url,
               ESCALATION_NAMESPACE=own_app.settings.namespace, ESCALATION_LOG_FORMAT="json")
    res = run_cli(env, "reconcile")
    assert res.returncode == 1, res.stderr
    assert f"projection differs from the ledger: dispute {ids[0]}: due_at (projection 1960" \
        in res.stderr
    assert "--repair-projection" in res.stderr
    assert "Traceback" not in res.stderr
    # not a terminal: no progress output, one summary line
    assert "reconcile: checked 3 rows and" in res.stderr and "2 repaired" in res.stderr
    assert set(_zset(own_app)) == {str(ids[1]), str(ids[2])}


def test_reconcile_sends_the_notification_of_a_decision_recorded_but_never_applied(
    own_app: Any,
) -> None:
    """A worker dies (or a Redis failover loses its apply) after the ledger commit; its lease
    runs out; reconcile runs before any worker claims the member again. The BEHIND repair must
    send the decision's review-stream entry (once), not only bring the payload forward."""
    from escalation.service_layer.core import CorePorts
    from escalation.service_layer.fire import FireDue, FiringHooks, fire_due

    app = own_app
    ids = enqueue(app, due_requests(3, app.scheduler.time()))

    class Died(Exception):
        pass

    def die(name: str) -> None:
        if name == "after_record":
            raise Died

    with pytest.raises(Died):
        fire_due(
            FireDue(batch_size=10, lease_ms=60_000, worker_id="w-dead"),
            CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                      calendars=app.calendars),
            FiringHooks(crashpoint=die),
        )
    for d in ids:  # what the passage of the lease does to the dead worker's locks
        app.redis.delete(app.scheduler.keys_for(d).lock(d))
        assert int(app.scheduler.payload(d)["seq"]) == 1
        assert app.store.get(d)[0].seq == 2

    report = _run(app)
    assert report.count(DiffKind.BEHIND, repaired=True) == 3, report.as_dict()
    keys = {f["idempotency_key"] for k in app.scheduler.shard_keys()
            for _, f in app.redis.xrange(k.review, "-", "+")}
    assert keys == {f"{d}:2" for d in ids}
    assert all(int(app.scheduler.payload(d)["seq"]) == 2 for d in ids)
    again = _run(app)
    assert again.count(repaired=True) == 0
    assert len([1 for k in app.scheduler.shard_keys()
                for _ in app.redis.xrange(k.review, "-", "+")]) == 3  # sent once


def test_reconcile_stops_on_a_demoted_primary_instead_of_repairing_without_the_note(
    own_app: Any,
) -> None:
    """READONLY (a primary demoted in a failover) concerns the server, not one item:
    reconcile propagates it (the maintenance job fails and runs again) rather than recording
    item errors or falling back to a restore that would drop the notification."""
    import redis

    from escalation.service_layer.core import CorePorts
    from escalation.service_layer.fire import FireDue, FiringHooks, fire_due

    app = own_app
    [did] = enqueue(app, due_requests(1, app.scheduler.time()))

    class Died(Exception):
        pass

    def die(name: str) -> None:
        if name == "after_record":
            raise Died

    with pytest.raises(Died):
        fire_due(
            FireDue(batch_size=10, lease_ms=60_000, worker_id="w-dead"),
            CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                      calendars=app.calendars),
            FiringHooks(crashpoint=die),
        )
    app.redis.delete(app.scheduler.keys_for(did).lock(did))

    class DemotedPrimary:
        """The real scheduler, except that writes meet a replica (as during a failover)."""

        def __getattr__(self, name: str) -> Any:
            return getattr(app.scheduler, name)

        def apply(self, ops: Any, *more: Any) -> Any:
            raise redis.exceptions.ReadOnlyError("You can't write against a read only replica.")

        restore = apply

    with pytest.raises(redis.exceptions.ReadOnlyError):
        reconcile(FullReconcile(),  # type: ignore[arg-type]
                  ReconcilePorts(DemotedPrimary(), app.store, reliability_redis(app)))
    assert int(app.scheduler.payload(did)["seq"]) == 1  # nothing repaired without the note
    assert _run(app).count(DiffKind.BEHIND, repaired=True) == 1
    keys = [f["idempotency_key"] for k in app.scheduler.shard_keys()
            for _, f in app.redis.xrange(k.review, "-", "+")]
    assert keys == [f"{did}:2"]


def test_reconcile_re_schedules_the_warnings_still_ahead_of_what_it_restores(
    own_app: Any, own_database_url: str, redis_url: str
) -> None:
    # The pre-breach warnings live in Redis only: a lost namespace lost them, and reconcile
    # re-created the escalations without them (a reviewer got no warning before the breach).
    import os
    from datetime import timedelta

    from escalation.bootstrap import warnings_for

    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=own_database_url,
               ESCALATION_NAMESPACE=own_app.settings.namespace, ESCALATION_LOG_FORMAT="json")
    opened = (own_app.scheduler.time() - timedelta(minutes=5)).isoformat()
    ids = []
    for i in range(3):
        did = str(uuid.uuid4())
        res = run_cli(env, "enqueue", "--dispute-id", did, "--source-hash", f"{i:02x}" * 32,
                      "--ladder", "cfpb_complaint_response", "--opened-at", opened)
        assert res.returncode == 0, res.stderr
        ids.append(did)
    queue = warnings_for(own_app)
    before = {d: queue.pending(d) for d in ids}
    assert all(before.values()), before  # 50% and 75% of the first window, still ahead
    delete_namespace(own_app.redis, own_app.settings.namespace)
    assert not any(queue.pending(d) for d in ids)
    res = run_cli(env, "reconcile")
    assert res.returncode == 0, res.stderr
    assert {d: queue.pending(d) for d in ids} == before
