"""Reliability scripts and checks see the ready ZSET (ADR 0006): a due member waiting in ``ready``
(promoted by a claim, not yet claimed) is dead-lettered, reconciled and checked by the doctor
exactly like a member of ``pending``.

Setup in every test: N escalations due now, one ``claim`` of batch 1 -- claim.lua promotes all
N due members pending -> ready and claims one, so N - 1 members sit in ``ready``.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from escalation.adapters.redis_scheduler import payload_to_escalation
from escalation.bootstrap import run_doctor
from escalation.domain.errors import ErrorCode
from escalation.domain.escalation import Status
from escalation.ports import ClaimedItem, LedgerEvent
from escalation.service_layer.dead_letters import DeadLetters
from escalation.service_layer.reconcile import DiffKind, FullReconcile, ReconcilePorts, reconcile
from tests.e2e.helpers import due_requests, enqueue
from tests.integration import reliability_support as support
from tests.integration.reliability_support import reliability_redis

own_database_url = support.own_database_url  # fixtures
own_app = support.own_app

LEASE_MS = 60_000


@pytest.fixture(scope="session")
def topology_shards() -> int:
    """One shard whatever the topology: ``_into_ready`` needs every member in one ready set."""
    return 1


def _into_ready(app: Any, n: int) -> tuple[uuid.UUID, list[uuid.UUID]]:
    """Enqueue ``n`` due escalations and claim one: returns (claimed id, ids left in ready)."""
    ids = enqueue(app, due_requests(n, app.scheduler.time(), past_s=30))
    got = app.scheduler.claim(1, LEASE_MS, "w-ready")
    (item,) = got.items
    claimed = item.escalation.dispute_id
    rest = [d for d in ids if d != claimed]
    keys = app.scheduler.keys_for(claimed)
    for d in rest:  # precondition: in ready, not in pending
        assert app.redis.zscore(keys.ready, str(d)) is not None
        assert app.redis.zscore(keys.pending, str(d)) is None
    return claimed, rest


def _dead(app: Any) -> DeadLetters:
    return DeadLetters(rel=reliability_redis(app), scheduler=app.scheduler, store=app.store,
                       actor="test", max_decision_attempts=1)


def test_dead_lettering_a_ready_member_removes_it_from_ready_and_prio_and_retry_restores_it(
    app: Any,
) -> None:
    _, rest = _into_ready(app, 5)
    did = rest[0]
    keys = app.scheduler.keys_for(did)
    app.redis.hset(keys.prio, str(did), "2")
    esc = payload_to_escalation(str(did), app.scheduler.payload(did))
    dl = _dead(app)
    assert dl.on_decision_failed(ClaimedItem(esc, 999, 0), ErrorCode.INVALID_INPUT,
                                 "poison") is True
    assert app.redis.zscore(keys.ready, str(did)) is None
    assert app.redis.zscore(keys.pending, str(did)) is None
    assert app.redis.hget(keys.prio, str(did)) is None
    (item,) = [x for x in dl.list() if x["dispute_id"] == str(did)]
    assert item["prio_weight"] == 2
    # the other ready members are untouched
    assert all(app.redis.zscore(keys.ready, str(d)) is not None for d in rest[1:])

    assert dl.retry(f"decision:{did}") == "requeued"
    assert app.redis.zscore(keys.pending, str(did)) is not None
    assert app.redis.zscore(keys.ready, str(did)) is None
    assert app.redis.hget(keys.prio, str(did)) == "2"  # its materiality weight is back


def test_purging_a_dead_letter_also_clears_a_ready_copy_and_its_weight(app: Any) -> None:
    _, rest = _into_ready(app, 3)
    did = rest[0]
    keys = app.scheduler.keys_for(did)
    esc = payload_to_escalation(str(did), app.scheduler.payload(did))
    dl = _dead(app)
    assert dl.on_decision_failed(ClaimedItem(esc, 999, 0), ErrorCode.INVALID_INPUT, "poison")
    # a stray ready entry + weight (e.g. written back by a late script) must not survive purge
    app.redis.zadd(keys.ready, {str(did): 1})
    app.redis.hset(keys.prio, str(did), "1")
    dl.purge(f"decision:{did}", confirm=True, reason="test")
    assert app.redis.zscore(keys.ready, str(did)) is None
    assert app.redis.hget(keys.prio, str(did)) is None
    assert app.scheduler.payload(did) is None


def test_reconcile_counts_ready_members_as_scheduled_and_removes_a_cancelled_one_from_ready(
    own_app: Any,
) -> None:
    app = own_app
    _, rest = _into_ready(app, 5)
    cancelled, paused, unknown_ready = rest[0], rest[1], str(uuid.uuid4())
    keys = app.scheduler.keys_for(cancelled)
    now = app.scheduler.time()
    app.redis.hset(keys.prio, mapping={str(cancelled): "2", str(paused): "1"})
    app.store.record_cancel(cancelled, "t", now, "resolved")
    app.store.append_event(LedgerEvent(paused, "PAUSED", "PAUSED", "t", now,
                                       {"status": Status.PAUSED}, {}))
    app.redis.zadd(keys.ready, {unknown_ready: 1})

    dry = reconcile(FullReconcile(True),
                    ReconcilePorts(app.scheduler, app.store, reliability_redis(app)))
    kinds = {(d.kind, d.dispute_id) for d in dry.diffs}
    assert (DiffKind.TERMINAL_MEMBER, str(cancelled)) in kinds
    assert (DiffKind.UNKNOWN_MEMBER, unknown_ready) in kinds
    # ready members are scheduled: never reported as a missing member
    assert not any(d.kind is DiffKind.MISSING_MEMBER for d in dry.diffs)
    assert dry.checked_members == 6  # 1 claimed (pending) + 4 ready + 1 unknown

    report = reconcile(FullReconcile(),
                       ReconcilePorts(app.scheduler, app.store, reliability_redis(app)))
    got = {(d.kind, d.dispute_id): d.repaired for d in report.diffs}
    assert got[(DiffKind.TERMINAL_MEMBER, str(cancelled))] is True
    assert got[(DiffKind.UNKNOWN_MEMBER, unknown_ready)] is True
    assert not any(k is DiffKind.MISSING_MEMBER for k, _ in got)
    assert app.redis.zscore(keys.ready, str(cancelled)) is None
    assert app.redis.hget(keys.prio, str(cancelled)) is None
    assert app.scheduler.payload(cancelled) is None
    assert app.redis.zscore(keys.ready, unknown_ready) is None
    # the paused one is off the schedule (ready and pending) with its payload at the new seq
    assert app.redis.zscore(keys.ready, str(paused)) is None
    assert app.redis.zscore(keys.pending, str(paused)) is None
    assert app.scheduler.payload(paused)["seq"] == "2"
    # the two untouched ready members are still there, and a second run finds nothing
    for d in rest[2:]:
        assert app.redis.zscore(keys.ready, str(d)) is not None
    assert reconcile(FullReconcile(),
                     ReconcilePorts(app.scheduler, app.store, reliability_redis(app))).diffs == []


def test_reconcile_remove_unparks_a_ready_member_and_keeps_its_weight(own_app: Any) -> None:
    app = own_app
    _, rest = _into_ready(app, 2)
    did = rest[0]
    keys = app.scheduler.keys_for(did)
    app.redis.hset(keys.prio, str(did), "3")
    seq = int(app.scheduler.payload(did)["seq"])
    rel = reliability_redis(app)
    assert rel.inspect([str(did)])[str(did)].ready is True
    assert rel.remove_member(str(did), seq, "unpark") == "removed"
    assert app.redis.zscore(keys.ready, str(did)) is None
    assert app.redis.hget(keys.prio, str(did)) == "3"  # kept for the resume
    assert app.scheduler.payload(did) is not None
    assert rel.remove_member(str(did), seq, "unpark") == "absent"


def test_doctor_counts_ready_members_and_flags_a_stuck_one_in_ready(own_app: Any) -> None:
    app = own_app
    _, rest = _into_ready(app, 4)
    checks = {c.name: c for c in run_doctor(app)}
    assert checks["ZSET_DRIFT"].ok, checks["ZSET_DRIFT"].detail
    assert "Redis ZSET 4 (of which ready 3)" in checks["ZSET_DRIFT"].detail
    assert checks["STUCK_MEMBER"].ok

    stuck = rest[0]
    keys = app.scheduler.keys_for(stuck)
    app.redis.delete(keys.payload(stuck))
    app.redis.zadd(keys.ready, {str(uuid.uuid4()): 5})  # unknown to PostgreSQL
    checks = {c.name: c for c in run_doctor(app)}
    assert not checks["STUCK_MEMBER"].ok and str(stuck) in checks["STUCK_MEMBER"].detail
    assert not checks["ZSET_DRIFT"].ok
