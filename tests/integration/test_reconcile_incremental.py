"""Incremental reconcile on real Redis and PostgreSQL: the ledger watermark, the sweep, the
state across a restart, ``escalation reconcile`` / ``--full``."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from escalation.adapters.reconcile_state import RedisReconcileState, state_key
from escalation.bootstrap import (
    build,
    namespace_binding_for,
    reconcile_run_for,
    reliability_for,
)
from escalation.domain.reconcile_sweep import ID_SPACE
from escalation.service_layer.reconcile import AheadRepair, DiffKind
from escalation.service_layer.reconcile_incremental import OVERLAP_S, IncrementalReconcile
from tests.e2e.helpers import due_requests, enqueue
from tests.helpers import run_cli
from tests.integration import reliability_support as support

own_database_url = support.own_database_url  # fixtures
own_app = support.own_app

MONTH_S = 30 * 86_400


def _run(app: Any, period_s: int = MONTH_S, *, reset: bool = False, **kw: Any) -> Any:
    """One run as the periodic job makes it (``reset``: as the CLI, which resets Redis
    ahead of the ledger); no overlap below the watermark unless asked, so that what a test
    wrote before a run is older than the next run's window."""
    kw.setdefault("overlap_s", 0)
    rel = reliability_for(app)
    ahead = AheadRepair(mark=namespace_binding_for(app), stream=rel,
                        ledger=app.store if reset else None, actor="reconcile")
    return reconcile_run_for(app, IncrementalReconcile(period_s, **kw), ahead=ahead, rel=rel)


def _drop(app: Any, did: Any) -> None:
    """Redis loses one escalation: payload and ZSET member gone, the ledger unchanged."""
    keys = app.scheduler.keys_for(did)
    app.redis.delete(keys.payload(did))
    app.redis.zrem(keys.pending, str(did))
    app.redis.zrem(keys.ready, str(did))


def _scheduled(app: Any) -> set[str]:
    return {m for m, _ in app.scheduler.pending_members(0)}


def _kinds(run: Any, did: Any) -> list[tuple[DiffKind, bool]]:
    return [(d.kind, d.repaired) for d in run.report.diffs if d.dispute_id == str(did)]


def test_changes_since_the_watermark_are_repaired_by_the_next_incremental_run(
    own_app: Any,
) -> None:
    now = own_app.scheduler.time()
    old = enqueue(own_app, due_requests(20, now, past_s=-3600))
    first = _run(own_app)
    assert (first.mode, first.reason) == ("full", "no_state")
    # a drift older than the watermark, in the second half of the id space (the sweep's
    # first slice of a 30-day period reads the first 0.01 %)
    stale = next(d for d in old if d.int > ID_SPACE // 2)
    _drop(own_app, stale)

    missing, ahead, forged = enqueue(own_app, due_requests(3, now, past_s=-3600))
    _drop(own_app, missing)  # recorded, then Redis lost it
    own_app.redis.hset(own_app.scheduler.keys_for(ahead).payload(ahead), "seq", "2")
    with own_app.engine.begin() as conn:  # the projection no longer what its ledger says
        conn.execute(sa.text("UPDATE escalation_state SET tier = 'senior' "
                             "WHERE dispute_id = :d"), {"d": forged})

    run = _run(own_app, reset=True, repair_projection=True)
    assert run.mode == "incremental"
    assert run.changed == 3  # the three new disputes; none of the 20 older ones
    assert _kinds(run, missing) == [(DiffKind.MISSING, True)]
    assert _kinds(run, ahead) == [(DiffKind.AHEAD, True)]
    assert (DiffKind.PROJECTION, True) in _kinds(run, forged)
    assert not run.report.errors
    assert _kinds(run, stale) == []  # older than the watermark: left to the sweep
    assert {str(missing), str(ahead), str(forged)} <= _scheduled(own_app)
    assert str(stale) not in _scheduled(own_app)
    state, _ = own_app.store.get(ahead)
    assert state.seq == 2  # one SCHEDULE_RESET row names the seq Redis used
    assert own_app.redis.hget(own_app.scheduler.keys_for(ahead).payload(ahead), "seq") == "2"
    with own_app.engine.connect() as conn:
        tier = conn.execute(sa.text("SELECT tier FROM escalation_state WHERE dispute_id = :d"),
                            {"d": forged}).scalar_one()
    assert tier == "standard"

    again = _run(own_app)
    assert again.mode == "incremental"
    assert [d for d in again.report.diffs if d.dispute_id != str(stale)] == []


def test_a_drift_older_than_the_watermark_is_found_by_the_sweep_within_its_period(
    own_app: Any,
) -> None:
    now = own_app.scheduler.time()
    ids = enqueue(own_app, due_requests(40, now, past_s=-3600))
    assert _run(own_app).mode == "full"
    lost = ids[:3]
    for did in lost:
        _drop(own_app, did)
    stray = str(uuid.uuid4())  # a member the ledger does not know
    own_app.redis.zadd(own_app.scheduler.keys_for(stray).pending, {stray: 1})

    period_s, every_s = 1800, 300  # a 30-minute sweep, a run every 5 minutes
    store = RedisReconcileState(own_app.redis, own_app.settings.namespace)
    found: set[str] = set()
    runs = 0
    for _ in range(period_s // every_s):
        state = store.load()
        assert state is not None
        # the runs come 5 minutes apart
        store.save(replace(state, sweep_at_ms=store.now_ms() - every_s * 1000))
        run = _run(own_app, period_s)
        runs += 1
        assert run.mode == "incremental" and run.changed == 0
        found |= {d.dispute_id for d in run.report.diffs if d.repaired}
        if run.lap_completed:
            break
    assert runs == period_s // every_s  # the lap takes the period, not one run
    assert found == {str(d) for d in lost} | {stray}
    assert _scheduled(own_app) == {str(d) for d in ids}


def test_a_notified_decision_the_ledger_lost_is_found_by_the_next_run(own_app: Any) -> None:
    """An asynchronous replica promoted without the last commits: Redis applied and
    notified a decision (payload at seq 2, a review-stream entry) that the ledger lacks, and
    the ledger shows no row since the watermark. The next periodic run finds it from the
    review stream and marks the namespace; `escalation reconcile` resets it."""
    (did,) = enqueue(own_app, due_requests(1, own_app.scheduler.time(), past_s=-3600))
    assert _run(own_app).mode == "full"
    keys = own_app.scheduler.keys_for(did)
    own_app.redis.hset(keys.payload(did), "seq", "2")
    own_app.redis.xadd(keys.review, {"dispute_id": str(did), "seq": "2",
                                     "match_decision": "PROMOTED_TO_SENIOR",
                                     "to_tier": "senior"})
    run = _run(own_app)
    assert run.mode == "incremental" and run.changed == 0 and run.notified == 1
    assert _kinds(run, did) == [(DiffKind.AHEAD, False)]
    mark = namespace_binding_for(own_app).resync()
    assert mark is not None and mark["reason"] == "ahead_in_reconcile"

    reset = _run(own_app, reset=True)  # the operator's command: a full run under the mark
    assert (reset.mode, reset.reason) == ("full", "resync_mark")
    assert reset.report.resync_cleared and len(reset.report.lost_decisions) == 1
    assert own_app.store.get(did)[0].seq == 2  # the SCHEDULE_RESET row names seq 2


def test_the_watermark_survives_a_restart(own_app: Any) -> None:
    enqueue(own_app, due_requests(5, own_app.scheduler.time(), past_s=-3600))
    first = _run(own_app)
    assert first.mode == "full"
    raw = json.loads(own_app.redis.get(state_key(own_app.settings.namespace)))
    assert raw["watermark"] == first.watermark_to
    assert raw["database"] == namespace_binding_for(own_app).database_identity()

    restarted = build(own_app.settings, actor="test-worker")  # a new process's App
    try:
        run = _run(restarted)
        assert run.mode == "incremental"
        from datetime import datetime, timedelta

        assert run.watermark_from == first.watermark_to
        # a dry run writes nothing, the state included
        dry = _run(restarted, dry_run=True, overlap_s=OVERLAP_S)
        assert dry.watermark_from == (datetime.fromisoformat(run.watermark_to)
                                      - timedelta(seconds=OVERLAP_S)).isoformat()
        assert _run(restarted).watermark_from == run.watermark_to
    finally:
        restarted.close()


def test_a_changed_database_identity_makes_the_run_full(own_app: Any) -> None:
    assert _run(own_app).mode == "full"
    assert _run(own_app).mode == "incremental"
    own_app.redis.set(f"escalations:{{{own_app.settings.namespace}:layout}}:database",
                      "another/1")
    run = _run(own_app)
    assert (run.mode, run.reason) == ("full", "database_changed")
    namespace_binding_for(own_app).mark_resync("ahead_on_claim", "test")
    assert _run(own_app).reason == "resync_mark"


def test_cli_reconcile_is_incremental_after_the_first_run_and_full_when_asked(
    own_app: Any, own_database_url: str, redis_url: str,
) -> None:
    ids = enqueue(own_app, due_requests(4, own_app.scheduler.time(), past_s=-3600))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=own_database_url,
               ESCALATION_NAMESPACE=own_app.settings.namespace, ESCALATION_LOG_FORMAT="json")
    modes = []
    for args in ((), (), ("--full",)):
        if args:
            _drop(own_app, ids[0])  # Redis loses it; only a full run (or the sweep) sees it
        res = run_cli(env, "reconcile", *args)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        line = ("reconcile: incremental run: " if out["incremental"]["mode"] == "incremental"
                else f"reconcile: full run ({out['incremental']['reason']})")
        assert line in res.stderr
        modes.append((out["incremental"]["mode"], out["incremental"]["reason"],
                      out["differences"]))
    assert modes[0][:2] == ("full", "no_state")
    assert modes[1][:2] == ("incremental", "") and modes[1][2] == {}
    assert modes[2] == ("full", "asked", {"MISSING": 1})
    assert str(ids[0]) in _scheduled(own_app)
