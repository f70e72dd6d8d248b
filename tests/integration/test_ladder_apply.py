"""Ladder migrations (docs/ladder-migrations.md, ADR 0004): plan hash drift, resumable apply,
history and checksums, and an apply while two workers fire."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from escalation.adapters.ladder_files import check_ladder_dir_with_history as check
from escalation.adapters.tables import escalation_audit
from escalation.domain.errors import UnknownPlanHash
from escalation.domain.ladder_plan import change_hash
from escalation.service_layer.core import CorePorts
from escalation.service_layer.fire import FireDue, fire_due
from tests.integration.ladder_support import MigEnv, hours


@pytest.fixture()
def env(app: Any, tmp_path: Path) -> MigEnv:
    return MigEnv.make(app, tmp_path)


def test_plan_writes_nothing_and_its_hash_is_deterministic(env: MigEnv) -> None:
    ids = env.enqueue("standard", due_at=env.app.scheduler.time() + hours(3), n=3)
    env.add("inserted")
    first, second = env.plan(), env.plan()
    assert first.plan_hash == second.plan_hash and len(first.plan_hash) == 64
    assert all(env.state(d).ladder_version == 1 for d in ids)
    assert env.history.history(env.name) == []


def test_plan_and_apply_report_progress_through_their_callbacks(env: MigEnv) -> None:
    from escalation.service_layer.ladder_migration import PlanMigration, plan_migration

    env.enqueue("standard", due_at=env.app.scheduler.time() + hours(3), n=3)
    env.add("inserted")
    calls: list[tuple[str, int, int | None]] = []
    plan = plan_migration(PlanMigration(env.name, 2), env.ports(),
                          lambda phase, done, total: calls.append((phase, done, total)))
    assert calls[-1] == ("plan", 3, 3)
    applied: list[tuple[str, int, int | None]] = []
    report = env.apply(plan.plan_hash, batch_size=2,
                       progress=lambda phase, done, total: applied.append((phase, done, total)))
    assert report.migrated == 3
    assert applied[-1] == ("migrate", 3, 3) and len(applied) >= 2


def test_apply_after_workers_decided_meanwhile_replans_them_instead_of_refusing(
    env: MigEnv,
) -> None:
    now = env.app.scheduler.time()
    ids = env.enqueue("standard", due_at=now - timedelta(seconds=5), n=2)
    env.add("inserted")
    plan = env.plan()
    assert {i.from_tier for i in plan.items} == {"standard"}
    fire_due(
        FireDue(batch_size=1, lease_ms=5000, worker_id="w"),
        CorePorts(scheduler=env.app.scheduler, store=env.app.store, ladders=env.catalog,
                  calendars=env.app.calendars),
    )
    promoted = [d for d in ids if env.state(d).tier != "standard"]
    assert len(promoted) == 1  # one decided on v1 after the plan was reviewed

    report = env.apply(plan.plan_hash)

    assert (report.planned, report.migrated, report.blocked) == (2, 2, [])
    for d in ids:
        state = env.state(d)
        assert state.ladder_version == 2
        [row] = env.migrated_rows(d)  # planned from the state at apply time
        assert row["from_tier"] == row["to_tier"] == state.tier
        assert env.app.store.verify(d) == []


def test_a_mistyped_plan_hash_is_unknown_and_nothing_is_written(env: MigEnv) -> None:
    ids = env.enqueue("standard", due_at=env.app.scheduler.time() + hours(3), n=2)
    env.add("inserted")
    good = env.plan().plan_hash
    with pytest.raises(UnknownPlanHash, match="unknown plan hash"):
        env.apply(good[:-1] + ("0" if good[-1] != "0" else "1"))
    assert all(env.state(d).ladder_version == 1 for d in ids)
    assert env.history.history(env.name) == []


def test_plan_hash_names_the_change_not_the_members(env: MigEnv) -> None:
    env.enqueue("standard", due_at=env.app.scheduler.time() + hours(3), n=2)
    env.add("inserted")
    before = env.plan()
    env.enqueue("standard", due_at=env.app.scheduler.time() + hours(3), n=1)  # now on v2
    with env.app.engine.begin() as conn:  # a worker-like decision moves a v1 escalation
        conn.execute(sa.text("UPDATE escalation_state SET tier = 'senior' WHERE dispute_id = "
                             ":d"), {"d": before.items[0].dispute_id})
    after = env.plan()
    assert after.plan_hash == before.plan_hash
    assert after.from_versions() == [1] and before.files == after.files


def test_apply_resumes_after_a_crash_between_record_and_redis(env: MigEnv) -> None:
    ids = env.enqueue("standard", due_at=env.app.scheduler.time() + hours(3), n=6)
    env.add("inserted")
    plan = env.plan()

    def crash(stage: str, index: int) -> None:
        if (stage, index) == ("after_record", 1):
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        env.apply(plan.plan_hash, batch_size=2, hook=crash)
    [run] = env.history.history(env.name)
    assert run.status == "failed" and run.migrated == 4
    stale_in_redis = [d for d in ids if env.pinned_in_redis(d) == f"{env.name}@1"]
    assert len(stale_in_redis) == 4  # batch 1 committed but never restored, batch 2 untouched

    report = env.apply(plan.plan_hash, batch_size=2)

    assert report.resumed and report.migrated == 2 and report.redis_repaired == 2
    [run] = env.history.history(env.name)
    assert (run.status, run.migrated, run.planned) == ("done", 6, 6)
    for d in ids:
        assert env.state(d).ladder_version == 2
        assert env.pinned_in_redis(d) == f"{env.name}@2"
        assert len(env.migrated_rows(d)) == 1
    for d in ids:
        assert env.app.store.verify(d) == []  # hash chain intact


def test_a_failed_redis_restore_leaves_the_resume_point_before_its_batch(
    env: MigEnv, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Restores run on their own thread, overlapping the next batch's transaction: the resume
    # point must only ever name a batch whose restore finished.
    ids = sorted(env.enqueue("standard", due_at=env.app.scheduler.time() + hours(3), n=8))
    env.add("inserted")
    plan = env.plan()
    real = env.app.scheduler.restore
    calls: list[int] = []

    def flaky(states: Any, notifications: Any = None) -> Any:
        calls.append(len(states))
        if len(calls) == 2:  # batch 1's restore
            raise ConnectionError("simulated Redis outage")
        return real(states, notifications)

    monkeypatch.setattr(env.app.scheduler, "restore", flaky)
    with pytest.raises(ConnectionError, match="simulated Redis outage"):
        env.apply(plan.plan_hash, batch_size=2)
    [run] = env.history.history(env.name)
    assert run.status == "failed" and run.migrated >= 4  # batches 0 and 1 committed
    assert run.redis_synced_through == ids[1]  # batch 0: the only restore that finished
    assert [env.pinned_in_redis(d) for d in ids[2:4]] == [f"{env.name}@1"] * 2

    monkeypatch.setattr(env.app.scheduler, "restore", real)
    report = env.apply(plan.plan_hash, batch_size=2)

    assert report.resumed and report.redis_repaired == run.migrated - 2
    for d in ids:
        assert env.state(d).ladder_version == 2
        assert env.pinned_in_redis(d) == f"{env.name}@2"
        assert len(env.migrated_rows(d)) == 1
        assert env.app.store.verify(d) == []


def test_history_records_checksum_and_check_refuses_an_edited_applied_file(
    env: MigEnv,
) -> None:
    did = env.enqueue("standard", due_at=env.app.scheduler.time() + hours(3))[0]
    v2 = env.add("renamed")
    env.apply(env.plan().plan_hash, actor="alice@ops", reason="CHG-42")
    [run] = env.history.history(env.name)
    assert run.checksum == env.catalog.get(env.name, 2).checksum and run.status == "done"
    assert (run.applied_by, run.reason) == ("alice@ops", "CHG-42")
    [row] = env.migrated_rows(did)
    assert row["actor"] == "alice@ops"
    # the apply's reason, then the release migrated to (ADR 0012)
    assert row["details"]["reason"].startswith(
        f"CHG-42; migrated to {env.name}@2, released as LADDER_RELEASED by ")
    assert check(env.dir, env.history) == []
    v2.write_text(v2.read_text() + "\n# edited after release\n")
    errors = check(env.dir, env.history)
    assert len(errors) == 1 and str(v2) in errors[0] and "checksum" in errors[0]


def test_apply_while_two_workers_fire_keeps_chains_gapless_and_never_demotes(
    env: MigEnv,
) -> None:
    now = env.app.scheduler.time()
    ids = env.enqueue("standard", due_at=now - timedelta(seconds=1), n=300)
    env.add("inserted")
    plan = env.plan()
    stop, started = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def worker(wid: str) -> None:
        started.wait(30)
        try:
            while not stop.is_set():
                fire_due(
                    FireDue(batch_size=10, lease_ms=5000, worker_id=wid),
                    CorePorts(scheduler=env.app.scheduler, store=env.app.store,
                              ladders=env.catalog, calendars=env.app.calendars),
                )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def hook(stage: str, index: int) -> None:
        started.set()  # workers start once the first batch is recorded: they overlap apply
        stop.wait(0.02)

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        report = env.apply(plan.plan_hash, batch_size=20, hook=hook, lock_wait_s=10)
        # let the workers drain whatever is still due, then stop them
        deadline = env.app.scheduler.time() + timedelta(seconds=20)
        while env.app.scheduler.time() < deadline:
            if all(env.state(d).tier != "standard" for d in ids):
                break
            stop.wait(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert errors == []
    print(f"migrated {report.migrated}, replanned {report.replanned}, "
          f"not_owner {report.not_owner}, left to workers {len(report.left_to_workers)}")
    assert report.migrated == 300 and report.blocked == []
    v1, v2 = env.catalog.get(env.name, 1), env.catalog.get(env.name, 2)
    with env.app.engine.connect() as conn:
        rows = conn.execute(
            sa.select(escalation_audit)
            .where(escalation_audit.c.dispute_id.in_(ids))
            .order_by(escalation_audit.c.dispute_id, escalation_audit.c.seq)
        ).mappings().all()
    chains: dict[Any, list[Any]] = {}
    for r in rows:
        chains.setdefault(r["dispute_id"], []).append(r)
    assert set(chains) == set(ids)
    for did, chain in chains.items():
        assert [r["seq"] for r in chain] == list(range(1, len(chain) + 1)), did
        assert [r["event"] for r in chain].count("LADDER_MIGRATED") == 1, did
        assert sum(r["event"] == "PROMOTED" for r in chain) == 1, did  # promoted exactly once
        rank = 0
        for r in chain:
            ladder = v1 if r["ladder_version"] == 1 else v2
            if r["event"] == "PROMOTED":  # against the version the row is pinned to
                nxt = ladder.next_tier(r["from_tier"])
                assert nxt is not None and nxt.id == r["to_tier"], (did, r["ladder_version"])
            new_rank = ladder.tier(r["to_tier"]).rank
            assert new_rank >= rank, did  # authority never decreases
            rank = new_rank
        state = env.state(did)
        assert state.ladder_version == 2
        assert env.pinned_in_redis(did) == f"{env.name}@2"
        payload = env.app.scheduler.payload(did)
        assert payload is not None and int(payload["seq"]) == state.seq


def test_reapplying_a_finished_plan_hash_is_a_no_op_that_says_already_applied(
    env: MigEnv,
) -> None:
    ids = env.enqueue("standard", due_at=env.app.scheduler.time() + hours(3), n=2)
    env.add("inserted")
    plan = env.plan()
    first = env.apply(plan.plan_hash)
    assert first.migrated == 2 and first.already_applied is None

    again = env.apply(plan.plan_hash)

    assert again.already_applied is not None and again.migrated == 0
    assert again.already_applied_message().startswith(
        f"version 2 of {env.name} is already applied (on ")
    assert again.already_applied_message().endswith("); nothing to do")
    [run] = env.history.history(env.name)  # no new run, the finished one untouched
    assert run.status == "done" and run.run_id == first.run_id
    assert all(len(env.migrated_rows(d)) == 1 for d in ids)


def test_apply_hands_the_migrated_pending_escalations_to_the_warnings_hook(
    env: MigEnv,
) -> None:
    ids = env.enqueue("standard", due_at=env.app.scheduler.time() + hours(6), n=3)
    env.add("inserted")
    plan = env.plan()
    seen: list[Any] = []
    env.apply(plan.plan_hash, on_scheduled=seen.extend)
    assert sorted(e.dispute_id for e in seen) == sorted(ids)
    assert all(e.ladder_version == 2 and e.seq == env.state(e.dispute_id).seq for e in seen)
    # built from the page's objects, they equal the projection read back in full
    assert seen == [env.history.states([e.dispute_id])[e.dispute_id] for e in seen]


def test_plan_or_apply_back_to_a_version_below_the_applied_one_is_refused(
    env: MigEnv,
) -> None:
    from escalation.domain.errors import LadderVersionSuperseded

    env.enqueue("standard", due_at=env.app.scheduler.time() + hours(3), n=2)
    env.add("inserted")
    env.apply(env.plan().plan_hash)
    runs_before = env.history.history(env.name)
    # planning back to v1 used to print a plan hash, and applying it wrote a finished run
    # "version 1, done" that reads like a rollback although nothing moved
    with pytest.raises(LadderVersionSuperseded, match=r"already migrated to version 2 .*"
                                                      r"never moves escalations back to version 1"):
        env.plan(to=1)
    v1_hash = change_hash(env.name, 1, [(1, env.catalog.get(env.name, 1).checksum)])
    with pytest.raises(LadderVersionSuperseded):
        env.apply(v1_hash, to=1)
    assert env.history.history(env.name) == runs_before
    assert LadderVersionSuperseded.exit_code == 2
