"""A ladder version goes live only once released; a broken release is reported and its
escalations are dead-lettered at once (docs/adr/0004-ladder-release.md).

Each test is one thing an admin does: add a bad file, add a good one, release it, delete
or edit a released file."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from escalation.adapters.ladder_files import check_ladder_dir_with_history as check
from escalation.bootstrap import build, run_doctor
from escalation.domain.errors import (
    InvalidInput,
    LadderError,
    LadderMigrationError,
    LadderReleaseError,
)
from escalation.service_layer.core import CorePorts
from escalation.service_layer.dead_letters import DeadLetters
from escalation.service_layer.fire import FireDue, FiringHooks, fire_due
from tests.integration.ladder_support import MigEnv, hours
from tests.integration.reliability_support import reliability_redis


@pytest.fixture()
def env(app: Any, tmp_path: Path) -> MigEnv:
    return MigEnv.make(app, tmp_path)


@pytest.fixture()
def dir_app(settings: Any, env: MigEnv) -> Iterator[Any]:
    """A second App whose ladder directory is the test's (doctor, bootstrap)."""
    a = build(settings.model_copy(update={"ladders_dir": env.dir}), actor="test-doctor")
    yield a
    a.close()


def _fire(env: MigEnv, dead: DeadLetters | None = None) -> Any:
    return fire_due(
        FireDue(batch_size=50, lease_ms=1, worker_id="w"),
        CorePorts(scheduler=env.app.scheduler, store=env.app.store, ladders=env.catalog,
                  calendars=env.app.calendars),
        FiringHooks(on_poison=None if dead is None else dead.on_decision_failed),
    )


def _dead(env: MigEnv) -> DeadLetters:
    return DeadLetters(rel=reliability_redis(env.app), scheduler=env.app.scheduler,
                       store=env.app.store, actor="test", max_decision_attempts=5)


def _ladder_check(app: Any) -> Any:
    [c] = [c for c in run_doctor(app) if c.name == "LADDER_FILES"]
    return c


def test_shipped_ladders_work_out_of_the_box_released_as_baseline(app: Any) -> None:
    shipped = sorted(int(p.name.split(".v")[1].removesuffix(".toml"))
                     for p in app.settings.ladders_dir.glob("cfpb_complaint_response.v*.toml"))
    assert len(shipped) >= 2
    assert app.ladders.versions("cfpb_complaint_response") == shipped  # every valid one
    assert app.ladders.latest("dispute_review").version == 1
    from escalation.adapters.ladder_history import LadderHistoryStore

    rows = LadderHistoryStore(app.engine).releases("cfpb_complaint_response")
    assert {r.released_by for r in rows.values()} == {"baseline"}


def test_an_invalid_unreleased_file_changes_nothing_enqueue_or_workers_do(
    env: MigEnv, dir_app: Any,
) -> None:
    bad = env.add("removed_unmapped", release=False)  # removes `senior` with no tier map
    errors = check(env.dir, env.history)
    assert len(errors) >= 1 and all(str(bad) in e for e in errors)
    now = env.app.scheduler.time()
    [did] = env.enqueue("standard", due_at=now - timedelta(seconds=1))
    assert env.state(did).ladder_version == 1  # pinned to the newest *released* version
    report = _fire(env)
    assert report.recorded == 1 and report.poison == 0
    assert env.state(did).tier == "senior"  # promoted with v1's ladder
    with pytest.raises(LadderMigrationError, match=r"version 2 is invalid \(.*tier_map"):
        env.plan()
    with pytest.raises(LadderError, match="tier_map"):
        env.release(2)
    assert env.catalog.versions(env.name) == [1]
    c = _ladder_check(dir_app)  # doctor reports the invalid file, as not live
    assert not c.ok and "0 broken release(s), 1 invalid" in c.detail


def test_a_valid_file_goes_live_for_new_escalations_only_when_released(env: MigEnv) -> None:
    before = env.enqueue("standard", due_at=env.app.scheduler.time() + hours(3))[0]
    env.add("inserted", release=False)
    unreleased = env.enqueue("standard", due_at=env.app.scheduler.time() + hours(3))[0]
    assert env.state(unreleased).ladder_version == 1
    with pytest.raises(LadderMigrationError, match="version 2 is not released"):
        env.plan()
    with pytest.raises(LadderError, match="is not released"):
        env.catalog.get(env.name, 2)
    first = env.release(2, actor="dana@ops", reason="CHG-9")
    again = env.release(2)  # a repeated release of the same file is a no-op
    assert first.new and not again.new and again.row.released_by == "dana@ops"
    after = env.enqueue("standard", due_at=env.app.scheduler.time() + hours(3))[0]
    assert env.state(after).ladder_version == 2
    assert env.state(before).ladder_version == 1  # pending ones wait for `ladder apply`


def test_releases_go_in_order(env: MigEnv) -> None:
    env.add("inserted", release=False)
    text = (env.dir / f"{env.name}.v2.toml").read_text()
    (env.dir / f"{env.name}.v3.toml").write_text(
        text.replace("version = 2", "version = 3").replace("previous_version = 1",
                                                           "previous_version = 2"))
    with pytest.raises(LadderError, match="version 2 is not released"):
        env.release(3)


def test_a_released_file_gone_missing_is_reported_and_dead_letters_at_once(
    env: MigEnv, dir_app: Any,
) -> None:
    v2 = env.add("inserted")
    [did] = env.enqueue("standard", due_at=env.app.scheduler.time() - timedelta(seconds=1))
    assert env.state(did).ladder_version == 2
    v2.unlink()
    errors = check(env.dir, env.history)
    assert any(e.startswith("released ladder file broken") and "is missing" in e and str(v2) in e
               for e in errors)
    c = _ladder_check(dir_app)
    assert not c.ok and "1 broken release(s)" in c.detail and "restore" in c.advice
    dead = _dead(env)
    report = _fire(env, dead)
    assert report.poison == 1 and report.recorded == 0
    [letter] = dead.list()  # first failure: a missing file does not heal by retrying
    assert letter["dispute_id"] == str(did) and "is missing" in letter["reason"]
    assert letter["attempts"] == 1


def test_an_edited_released_file_is_reported_refused_and_dead_letters_at_once(
    env: MigEnv, dir_app: Any,
) -> None:
    v2 = env.add("inserted")
    [did] = env.enqueue("standard", due_at=env.app.scheduler.time() - timedelta(seconds=1))
    # edited after release: the window, not the first "24" anywhere (the random ladder name
    # in the file may contain "24", and renaming the ladder is a different fault)
    edited = v2.read_text().replace("amount = 24,", "amount = 12,", 1)
    assert edited != v2.read_text()
    v2.write_text(edited)
    errors = check(env.dir, env.history)
    assert any(str(v2) in e and "checksum" in e for e in errors)
    assert not _ladder_check(dir_app).ok
    with pytest.raises(LadderReleaseError, match="edited after release"):
        env.catalog.latest(env.name)  # enqueue refuses rather than pin v1 silently
    with pytest.raises(LadderError, match="never edited"):
        env.release(2)
    with pytest.raises(LadderMigrationError, match="edited after release"):
        env.plan()
    dead = _dead(env)
    assert _fire(env, dead).poison == 1
    [letter] = dead.list()
    assert letter["dispute_id"] == str(did) and "edited after release" in letter["reason"]


def test_restoring_an_edited_release_then_retry_all_fires_what_was_dead_lettered(
    env: MigEnv, dir_app: Any,
) -> None:
    v2 = env.add("inserted")
    ids = env.enqueue("standard", due_at=env.app.scheduler.time() - timedelta(seconds=1))
    ids += env.enqueue("standard", due_at=env.app.scheduler.time() - timedelta(seconds=1))
    released = v2.read_text()
    v2.write_text(released.replace("amount = 24,", "amount = 12,", 1))
    dead = _dead(env)
    assert _fire(env, dead).poison == 2
    assert sorted(d["dispute_id"] for d in dead.list()) == sorted(str(i) for i in ids)
    [c] = [c for c in run_doctor(dir_app) if c.name == "DEAD_LETTERS"]
    assert not c.ok and "dead-lettered escalations 2" in c.detail and "retry --all" in c.advice

    v2.write_text(released)  # the file restored: the release is intact again
    assert dead.retry_all(kind="notify") == {}  # no notification dead letters here
    assert dead.retry_all(kind="decision", match="no such text") == {}
    assert dead.retry_all(kind="decision", match=v2.name) == {"requeued": 2}
    assert dead.list() == []
    [c] = [c for c in run_doctor(dir_app) if c.name == "DEAD_LETTERS"]
    assert c.ok, c
    # the DEAD_LETTERED rows moved the recorded seq on: the first pass re-applies the recorded
    # state (stale), the next one promotes
    recorded = poison = 0
    for _ in range(3):
        report = fire_due(
            FireDue(batch_size=50, lease_ms=30_000, worker_id="w"),
            CorePorts(scheduler=env.app.scheduler, store=env.app.store, ladders=env.catalog,
                      calendars=env.app.calendars),
            FiringHooks(on_poison=dead.on_decision_failed),
        )
        recorded, poison = recorded + report.recorded, poison + report.poison
    assert (recorded, poison) == (2, 0)
    assert all(env.state(i).tier != "standard" for i in ids)
    with pytest.raises(InvalidInput):
        dead.retry_all(kind="decisions")


def test_a_due_warning_of_an_edited_release_is_dropped_and_logged_not_raised(
    env: MigEnv,
) -> None:
    """A worker fires every ladder: one broken release must not stop it. The warning of an
    escalation pinned to an edited released file is dropped (the breach dead-letters it)."""
    from escalation.adapters.redis_warnings import WarningMember
    from escalation.bootstrap import warnings_for
    from escalation.service_layer.warnings import FireWarnings, WarningPorts, fire_warnings

    v2 = env.add("inserted")
    [did] = env.enqueue("standard", due_at=env.app.scheduler.time() + hours(2))
    v2.write_text(v2.read_text().replace("amount = 24,", "amount = 12,", 1))
    queue = warnings_for(env.app)
    queue.schedule([WarningMember(did, env.state(did).seq, "0.50", 0)])  # due long ago
    events: list[tuple[str, dict[str, Any]]] = []
    report = fire_warnings(
        FireWarnings("w"), WarningPorts(queue, env.app.scheduler, env.app.store, env.catalog,
                                        env.app.calendars),
        lambda event, **kw: events.append((event, kw)))
    assert (report.claimed, report.unresolvable, report.recorded) == (1, 1, 0)
    [(event, fields)] = events
    assert event == "escalation.warning_dropped" and fields["level"] == "warning"
    assert fields["dispute_id"] == str(did) and "edited after release" in fields["reason"]
    assert fields["match_decision"] == "SLA_WARNING_DROPPED"
    assert [r.event for r in env.app.store.trail(did)] == ["ENQUEUED"]  # nothing recorded
    assert queue.pending(did) == []  # consumed: advisory, at most once


def test_plan_to_a_version_below_a_later_release_checks_only_its_own_path(
    env: MigEnv,
) -> None:
    """v3 released after v2 is not part of a migration to v2: planning to v2 (e.g. to finish
    a v2 apply) is not refused for a v3 'released version has no ladder file'."""
    env.enqueue("standard", due_at=env.app.scheduler.time() + hours(2))  # pinned to v1
    v2 = env.add("inserted")
    text = v2.read_text().replace("version = 2\nprevious_version = 1",
                                  "version = 3\nprevious_version = 2", 1)
    assert "version = 3" in text
    (env.dir / f"{env.name}.v3.toml").write_text(text)
    env.release(3)
    plan = env.plan(to=2)
    assert plan.target_version == 2 and len(plan.items) == 1 and not plan.blocked
    # an edited file of that path is the caller's to fix: exit 2, not 1
    v2.write_text(v2.read_text().replace("amount = 24,", "amount = 12,", 1))
    from escalation.domain.errors import LadderNotReleased

    with pytest.raises(LadderNotReleased, match="version 2 is invalid") as info:
        env.plan(to=3)
    assert info.value.exit_code == 2
