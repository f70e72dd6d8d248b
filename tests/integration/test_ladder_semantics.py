"""What a ladder migration does to pending escalations, one test per kind of change
(docs/ladders.md, "Migration semantics"; fixtures:
tests/fixtures/ladders/<variant>/migdemo.v2.toml)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from escalation.domain.errors import LadderError, LadderMigrationError
from escalation.domain.escalation import Status
from escalation.service_layer.core import CorePorts
from escalation.service_layer.fire import FireDue, fire_due
from tests.integration.ladder_support import MigEnv, hours


@pytest.fixture()
def env(app: Any, tmp_path: Path) -> MigEnv:
    return MigEnv.make(app, tmp_path)


def _fire(env: MigEnv) -> Any:
    return fire_due(
        FireDue(batch_size=50, lease_ms=5000, worker_id="w-test"),
        CorePorts(scheduler=env.app.scheduler, store=env.app.store, ladders=env.catalog,
                  calendars=env.app.calendars),
    )


def test_inserted_tier_keeps_current_tier_and_next_promotion_goes_to_new_tier(
    env: MigEnv,
) -> None:
    now = env.app.scheduler.time()
    due_soon = env.enqueue("standard", due_at=now - timedelta(seconds=5))[0]
    in_senior = env.enqueue("senior", due_at=now + hours(10))[0]
    env.add("inserted")
    plan = env.plan()
    assert plan.groups() == [("senior", "senior", 1), ("standard", "standard", 1)]
    changed = {i.dispute_id: i for i in plan.changed()}
    assert set(changed) == {due_soon}  # standard's next tier is now team_lead
    assert (changed[due_soon].old_next, changed[due_soon].new_next) == ("senior", "team_lead")

    report = env.apply(plan.plan_hash)

    assert report.migrated == 2
    for did, tier in ((due_soon, "standard"), (in_senior, "senior")):
        st = env.state(did)
        assert (st.tier, st.ladder_version) == (tier, 2)
        assert env.pinned_in_redis(did) == f"{env.name}@2"
        [row] = env.migrated_rows(did)
        assert (row["from_tier"], row["to_tier"], row["ladder_version"]) == (tier, tier, 2)
        assert row["details"]["from_version"] == 1 and row["details"]["to_version"] == 2
    assert _fire(env).decisions == {"PROMOTED_TO_TEAM_LEAD": 1}
    assert env.state(due_soon).tier == "team_lead"


def test_renamed_tier_keeps_its_stable_id_and_changes_only_the_display_name(
    env: MigEnv,
) -> None:
    now = env.app.scheduler.time()
    did = env.enqueue("senior", due_at=now + hours(5))[0]
    due_before = env.state(did).due_at
    env.add("renamed")
    plan = env.plan()
    assert plan.groups() == [("senior", "senior", 1)]
    assert plan.changed() == []  # same ids, same windows: nothing a reviewer must look at
    env.apply(plan.plan_hash)
    st = env.state(did)
    assert (st.tier, st.ladder_version, st.due_at) == ("senior", 2, due_before)
    assert env.catalog.get(env.name, 2).tier("senior").name == "Second-line review"


def test_removed_tier_moves_escalations_by_tier_map_never_lower(env: MigEnv) -> None:
    now = env.app.scheduler.time()
    senior = env.enqueue("senior", due_at=now + hours(5))[0]
    standard = env.enqueue("standard", due_at=now + hours(5))[0]
    env.add("removed")
    plan = env.plan()
    assert plan.groups() == [("senior", "compliance", 1), ("standard", "standard", 1)]
    env.apply(plan.plan_hash)
    assert env.state(senior).tier == "compliance"
    assert env.state(standard).tier == "standard"
    v1, v2 = env.catalog.get(env.name, 1), env.catalog.get(env.name, 2)
    [row] = env.migrated_rows(senior)
    assert v2.tier(row["to_tier"]).rank >= v1.tier(row["from_tier"]).rank


def test_removed_tier_without_map_is_refused(env: MigEnv) -> None:
    did = env.enqueue("senior", due_at=env.app.scheduler.time() + hours(5))[0]
    env.add("removed_unmapped", release=False)
    with pytest.raises(LadderError, match=r"tier_map: tier 'senior'"):
        env.release(2)
    with pytest.raises(LadderMigrationError, match=r"version 2 is invalid \(.*tier_map"):
        env.plan()
    assert env.state(did).ladder_version == 1
    assert env.catalog.versions(env.name) == [1]


def test_reorder_that_would_demote_a_pending_escalation_is_refused(env: MigEnv) -> None:
    now = env.app.scheduler.time()
    in_compliance = env.enqueue("compliance", due_at=now + hours(5))[0]
    in_standard = env.enqueue("standard", due_at=now + hours(5))[0]
    env.add("reordered")
    plan = env.plan()
    assert [b.dispute_id for b in plan.blocked] == [in_compliance]
    assert "demotion" in plan.blocked[0].reason
    report = env.apply(plan.plan_hash)
    assert [b.dispute_id for b in report.blocked] == [in_compliance]  # left on v1, reported
    assert env.state(in_compliance).ladder_version == 1
    assert env.migrated_rows(in_compliance) == []
    assert env.state(in_standard).ladder_version == 2 and report.migrated == 1
    [run] = env.history.history(env.name)
    assert (run.status, run.blocked, run.migrated) == ("done", 1, 1)


def test_lengthened_window_recomputes_due_from_tier_entry(env: MigEnv) -> None:
    now = env.app.scheduler.time().replace(microsecond=0)
    opened = now - hours(3)
    did = env.enqueue("standard", opened_at=opened)[0]
    assert env.state(did).due_at == opened + hours(24)
    env.add("lengthened")
    plan = env.plan()
    assert [i.dispute_id for i in plan.changed()] == [did]
    env.apply(plan.plan_hash)
    assert env.state(did).due_at == opened + hours(48)
    [row] = env.migrated_rows(did)
    assert row["details"]["due_rule"] == "recomputed"
    assert row["due_at"] == opened + hours(24) and row["next_due_at"] == opened + hours(48)


def test_shortened_window_never_fires_a_burst_of_retroactive_breaches(env: MigEnv) -> None:
    now = env.app.scheduler.time().replace(microsecond=0)
    long_in = env.enqueue("standard", opened_at=now - hours(10))[0]  # 2h window: 8h overdue
    recent = env.enqueue("standard", opened_at=now - timedelta(minutes=10))[0]
    env.add("shortened")
    plan = env.plan()
    before = env.app.scheduler.time()
    report = env.apply(plan.plan_hash)
    after = env.app.scheduler.time()

    assert report.suppressed == 1
    floored = env.state(long_in).due_at
    assert before + timedelta(minutes=30) - timedelta(seconds=1) <= floored
    assert floored <= after + timedelta(minutes=30)
    [row] = env.migrated_rows(long_in)
    assert row["details"]["breach_suppressed_by_migration"] is True
    assert env.state(recent).due_at == now - timedelta(minutes=10) + hours(2)
    assert _fire(env).claimed == 0  # nothing became due by the migration


def test_shortened_window_never_delays_an_escalation_given_an_explicit_due_time(
    env: MigEnv,
) -> None:
    # An explicit due_at is earlier than tier entry + the old window. Recomputing "entry +
    # new window" moved such escalations LATER (one already overdue by an hour went 6 h
    # into the future and stopped firing). Shortened by 22 h, the due time moves 22 h
    # sooner (floored at now + grace) and never later; one already due stays due and fires.
    now = env.app.scheduler.time().replace(microsecond=0)
    soon = env.enqueue("standard", due_at=now + hours(1))[0]
    overdue = env.enqueue("standard", due_at=now - hours(1))[0]
    env.add("shortened")  # standard 24 h -> 2 h, grace 30 min
    before = env.app.scheduler.time()
    report = env.apply(env.plan().plan_hash)
    after = env.app.scheduler.time()

    floored = env.state(soon).due_at
    assert before + timedelta(minutes=30) - timedelta(seconds=1) <= floored
    assert floored <= after + timedelta(minutes=30) < now + hours(1)
    assert env.state(overdue).due_at == now - hours(1)  # not moved later
    [row] = env.migrated_rows(overdue)
    assert row["details"]["breach_suppressed_by_migration"] is False
    assert report.suppressed == 1  # the floored one only
    fired = _fire(env)
    assert fired.decisions == {"PROMOTED_TO_SENIOR": 1}
    assert env.state(overdue).tier == "senior" and env.state(soon).tier == "standard"


def test_terminal_tier_changed_pending_escalation_in_old_terminal_promotes(
    env: MigEnv,
) -> None:
    now = env.app.scheduler.time()
    did = env.enqueue("compliance", due_at=now - timedelta(seconds=5))[0]
    env.add("terminal")
    plan = env.plan()
    [item] = plan.items
    assert (item.old_next, item.new_next) == (None, "executive")
    env.apply(plan.plan_hash)
    assert _fire(env).decisions == {"PROMOTED_TO_EXECUTIVE": 1}
    st = env.state(did)
    assert (st.tier, st.status) == ("executive", Status.PENDING)
