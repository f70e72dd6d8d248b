"""Obligations on real PostgreSQL and Redis (docs/adr/0010-obligations-and-resolution.md).

record_action and resolve through the bootstrap-built adapters: the rows they append chain
and verify as ``audit verify`` checks them, the projection's ``deadlines`` (binding clocks),
``obligations`` (every clock) and ``status`` columns, the checkpoint's projection-vs-ledger
check, reconcile, idempotency under two concurrent writers, and a worker burst after a
provisional credit that moved the due time later.

The servers' clock is real, so the disputes are anchored relative to Redis TIME and the
expected instants come from the domain rule (the hand-computed table of them is
tests/unit/test_obligations.py).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import uuid
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from escalation.adapters.checkpoints import PostgresCheckpoints
from escalation.domain.calendars import with_institution
from escalation.domain.escalation import Status
from escalation.domain.obligations import binding
from escalation.domain.sla_timing import resolve_deadlines
from escalation.domain.timeutil import to_ms
from escalation.entrypoints.worker import run_worker
from escalation.service_layer.checkpoint import verify
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueOne, EnqueueRequest, enqueue_on_breach
from escalation.service_layer.fire import FireDue, fire_due
from escalation.service_layer.obligations import (
    ObligationPorts,
    ObligationResult,
    RecordAction,
    Resolve,
    dispute_clocks,
    record_action,
    recorded_actions,
    resolve,
)
from escalation.service_layer.reconcile import FullReconcile, ReconcilePorts, reconcile
from tests.integration import reliability_support as support
from tests.integration.reliability_support import reliability_redis

own_database_url = support.own_database_url  # fixtures
own_app = support.own_app

NY = ZoneInfo("America/New_York")
REG_E = "reg_e_error_resolution"
CFPB = "cfpb_complaint_response"
NO = {"new_account": False, "point_of_sale": False, "foreign_initiated": False}


def _kw(app: Any) -> dict[str, Any]:
    return {"scheduler": app.scheduler, "store": app.store, "ladders": app.ladders,
            "calendars": app.calendars}


def _enqueue(app: Any, anchor: datetime, *, ladder: str = REG_E, tier: str = "compliance",
             attributes: dict[str, object] | None = None) -> uuid.UUID:
    did = uuid.uuid4()
    enqueue_on_breach(EnqueueOne(
        EnqueueRequest(dispute_id=did, materiality="125.00",
                       source_hash=hashlib.sha256(did.bytes).hexdigest(), tier=tier,
                       opened_at=anchor, anchor_at=anchor, ladder=ladder,
                       timezone="America/New_York", calendar="us_federal_reserve",
                       attributes=NO if attributes is None and ladder == REG_E else attributes),
        "svc", ladder), CorePorts(**_kw(app)))
    return did


def _act(app: Any, did: uuid.UUID, action: str, at: datetime, key: str) -> ObligationResult:
    money = action == "provisional_credit"
    return record_action(RecordAction(did, action, at, "ops.alice", key,
                                      amount="125.00" if money else None,
                                      currency="USD" if money else None),
                         ObligationPorts(**_kw(app)))


def _projection(app: Any, did: uuid.UUID) -> dict[str, Any]:
    with app.engine.connect() as conn:
        row = conn.execute(sa.text(
            "SELECT status, due_at, deadlines, obligations, regulatory_deadline, last_seq "
            "FROM escalation_state WHERE dispute_id = :d"), {"d": did}).mappings().one()
    return dict(row)


def _pairs(value: Any) -> list[list[str]] | None:
    if value is None:
        return None
    items = json.loads(value) if isinstance(value, str) else value
    return [[n, datetime.fromisoformat(at).isoformat()] for n, at in items]


def _iso(clocks: Any) -> list[list[str]]:
    return [[n, at.isoformat()] for n, at in clocks]


def _verified(app: Any, did: uuid.UUID) -> Any:
    report = verify(PostgresCheckpoints(app.engine), did)
    assert report.ok, report
    return report


def _members(app: Any) -> set[str]:
    return {m for m, _ in app.scheduler.pending_members(0)}


def _local(now: datetime, days: int, hour: int = 10) -> datetime:
    """``hour``:00 New York time, ``days`` local days before ``now``."""
    day = now.astimezone(NY).date() - timedelta(days=days)
    return datetime(day.year, day.month, day.day, hour, tzinfo=NY)


def test_actions_and_resolution_chain_verify_and_set_the_projection(app: Any) -> None:
    now = app.scheduler.time()
    anchor = _local(now, 6)
    did = _enqueue(app, anchor)
    enq = _projection(app, did)
    # enqueue: both Reg E clocks at the 10-bd instant (no provisional credit yet)
    d10 = app.store.trail(did)[0].details["deadline_rules"][
        "determine_or_provisionally_credit"]["at"]
    assert _pairs(enq["deadlines"]) == [["determine_or_provisionally_credit", d10],
                                        ["investigation", d10]]
    assert enq["status"] == "pending" and enq["obligations"] is None

    pc = _act(app, did, "provisional_credit", anchor + timedelta(days=1), "pc-1")
    rows = app.store.trail(did)
    ladder = app.ladders.get(REG_E, 3)
    scoped = pc.escalation.calendars(app.calendars)
    actions = recorded_actions(rows)
    placed = dispute_clocks(ladder, rows, actions, scoped, ())
    bind = binding(ladder, placed, actions, now)
    proj = _projection(app, did)
    assert [n for n, _ in bind] == ["investigation", "provisional_credit_notice"]
    assert _pairs(proj["deadlines"]) == _iso(bind) == _iso(pc.escalation.deadlines)
    assert _pairs(proj["obligations"]) == _iso((c.name, c.at) for c in placed)
    assert [n for n, _ in _pairs(proj["obligations"]) or []] == [
        "determine_or_provisionally_credit", "investigation", "provisional_credit_notice"]
    assert proj["due_at"] == pc.due_after
    assert dict(app.scheduler.pending_members(0))[str(did)] == to_ms(pc.due_after)
    assert app.scheduler.payload(did)["seq"] == str(pc.seq)

    _act(app, did, "provisional_credit_notice", anchor + timedelta(days=1, hours=1), "pcn-1")
    _act(app, did, "determination", anchor + timedelta(days=2), "det-1")
    res = resolve(Resolve(did, "no_error_found", "ops.alice", "r-1", reason="merchant proved"),
                  **_kw(app))
    proj = _projection(app, did)
    assert proj["status"] == "resolved" and proj["due_at"] is None
    assert proj["deadlines"] is None  # nothing binds a resolved dispute
    assert "results_notice" in [n for n, _ in _pairs(proj["obligations"]) or []]
    assert str(did) not in _members(app) and app.scheduler.payload(did) is None
    assert res.escalation.status is Status.RESOLVED

    # the results notice is owed after the determination: recorded after the resolution
    late = _act(app, did, "results_notice", now - timedelta(minutes=1), "rn-1")
    assert late.redis is None and _projection(app, did)["status"] == "resolved"
    rows = app.store.trail(did)
    assert [r.event for r in rows] == ["ENQUEUED", "ACTION_RECORDED", "ACTION_RECORDED",
                                       "ACTION_RECORDED", "RESOLVED", "ACTION_RECORDED"]
    assert [r.match_decision for r in rows[1:]] == [
        "ACTION_PROVISIONAL_CREDIT", "ACTION_PROVISIONAL_CREDIT_NOTICE", "ACTION_DETERMINATION",
        "RESOLVED_NO_ERROR_FOUND", "ACTION_RESULTS_NOTICE"]
    assert all(r.prev_hash == p.row_hash for p, r in itertools.pairwise(rows))
    assert rows[4].details["late"] == [] and rows[4].details["from_status"] == "pending"
    report = _verified(app, did)
    assert report.projection_mismatches == []


def test_terminal_dispute_resolved_later_passes_the_projection_check(app: Any) -> None:
    """A CFPB complaint sent 70 days ago, in its terminal tier: it fires TERMINAL, then is
    resolved; both its 15- and 60-day clocks were missed."""
    now = app.scheduler.time()
    did = _enqueue(app, _local(now, 70), ladder=CFPB, attributes={})
    for _ in range(5):
        fire_due(FireDue(batch_size=100, lease_ms=60_000, worker_id="w1"), CorePorts(**_kw(app)))
        if app.store.get(did)[1] is Status.TERMINAL:
            break
    assert app.store.get(did)[1] is Status.TERMINAL
    snap = PostgresCheckpoints(app.engine)
    with snap.snapshot() as s:
        assert s.projection_mismatches(did) == []
    res = resolve(Resolve(did, "closed_with_explanation", "ops.alice", "r-1"), **_kw(app))
    row = app.store.trail(did)[-1]
    assert row.details["from_status"] == "terminal"
    assert row.details["late"] == ["company_response", "final_response"]
    assert res.escalation.status is Status.RESOLVED
    assert _projection(app, did)["status"] == "resolved"
    with snap.snapshot() as s:
        assert s.projection_mismatches(did) == []
    _verified(app, did)


def test_pending_dispute_resolved_passes_the_projection_check(app: Any) -> None:
    now = app.scheduler.time()
    did = _enqueue(app, _local(now, 1))
    resolve(Resolve(did, "error_corrected", "ops.alice", "r-1"), **_kw(app))
    with PostgresCheckpoints(app.engine).snapshot() as s:
        assert s.projection_mismatches(did) == []
    _verified(app, did)


def test_reconcile_keeps_a_resolved_dispute_out_of_redis(own_app: Any) -> None:
    app = own_app
    now = app.scheduler.time()
    did = _enqueue(app, _local(now, 1))
    before = app.store.get(did)[0]
    resolve(Resolve(did, "error_corrected", "ops.alice", "r-1"), **_kw(app))
    assert str(did) not in _members(app)
    reconcile(FullReconcile(), ReconcilePorts(app.scheduler, app.store, reliability_redis(app)))
    assert str(did) not in _members(app) and app.scheduler.payload(did) is None
    # a stale member (the pre-resolution state put back, as a lost cancel would leave it) is
    # removed, not restored
    app.scheduler.enqueue_many([before])
    assert str(did) in _members(app)
    reconcile(FullReconcile(), ReconcilePorts(app.scheduler, app.store, reliability_redis(app)))
    assert str(did) not in _members(app) and app.scheduler.payload(did) is None
    assert app.store.get(did)[1] is Status.RESOLVED


def test_two_concurrent_writers_with_one_key_write_one_row(app: Any) -> None:
    now = app.scheduler.time()
    anchor = _local(now, 3)
    did = _enqueue(app, anchor)
    barrier = threading.Barrier(2)
    results: list[ObligationResult] = []
    errors: list[BaseException] = []

    def write() -> None:
        barrier.wait()
        try:
            results.append(_act(app, did, "provisional_credit", anchor + timedelta(hours=2),
                                "same-key"))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    rows = [r for r in app.store.trail(did) if r.event == "ACTION_RECORDED"]
    assert len(rows) == 1
    assert sorted(r.replayed for r in results) == [False, True]
    assert {r.seq for r in results} == {rows[0].seq}
    _verified(app, did)


def _due_soon_anchor(app: Any, now: datetime) -> datetime:
    """An anchor whose 10-bd instant is 2 h to 2 days after ``now``: its conservative cap on
    the compliance tier (3 days before) has passed, so the enqueued dispute is already due."""
    ladder = app.ladders.get(REG_E, 3)
    scoped = with_institution(app.calendars, "us_federal_reserve", "America/New_York")
    for days in range(1, 30):
        anchor = _local(now, days, hour=9)
        d10 = {r.name: r.at for r in resolve_deadlines(ladder, anchor, scoped, NO)}[
            "determine_or_provisionally_credit"]
        if now + timedelta(hours=2) < d10 < now + timedelta(days=2):
            return anchor
    raise AssertionError("no anchor found")  # pragma: no cover - 10 bd always fit


def test_worker_burst_after_a_provisional_credit_does_not_fire_at_the_old_due(app: Any) -> None:
    """Two disputes with the same anchor, both already due at their conservative cap; one
    gets a timely provisional credit. The burst escalates the other (terminal) and leaves
    the credited one pending at its re-planned due time."""
    now = app.scheduler.time()
    anchor = _due_soon_anchor(app, now)
    did, twin = _enqueue(app, anchor), _enqueue(app, anchor)
    old_due = app.store.get(did)[0].due_at
    assert old_due <= app.scheduler.time()  # due now: a burst would escalate it to terminal
    res = _act(app, did, "provisional_credit", app.scheduler.time() - timedelta(minutes=1),
               "pc-1")
    assert res.due_before == old_due and res.due_after is not None
    assert res.due_after > app.scheduler.time() + timedelta(hours=1)
    assert app.store.trail(did)[-1].details["replan"]["due_at_after"] == (
        res.due_after.isoformat())
    run_worker(app, burst=True)
    assert app.store.get(twin)[1] is Status.TERMINAL  # the old due time did fire
    assert app.store.get(did)[1] is Status.PENDING
    assert [r.event for r in app.store.trail(did)] == ["ENQUEUED", "ACTION_RECORDED"]
    assert dict(app.scheduler.pending_members(0))[str(did)] == to_ms(res.due_after)


def test_cancel_then_resolve_keeps_the_projection_and_the_ledger_in_agreement(app: Any) -> None:
    """A cancel records no finding on a version with actions; the resolve that follows it
    leaves the dispute 'resolved' with both a CANCELLED and a RESOLVED row, which the
    checkpoint's projection check and `audit verify` accept."""
    from escalation.service_layer.cancel import cancel

    now = app.scheduler.time()
    did = _enqueue(app, _local(now, 1), tier="standard")
    cancel(did, scheduler=app.scheduler, store=app.store, actor="ops.alice", reason="dup")
    resolve(Resolve(did, "withdrawn_by_consumer", "ops.alice", "r-1"), **_kw(app))
    assert _projection(app, did)["status"] == "resolved"
    assert [r.event for r in app.store.trail(did)][-2:] == ["CANCELLED", "RESOLVED"]
    with PostgresCheckpoints(app.engine).snapshot() as s:
        assert s.projection_mismatches(did) == []
    _verified(app, did)
