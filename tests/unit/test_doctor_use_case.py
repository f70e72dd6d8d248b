"""``escalation doctor`` (service_layer.doctor.run_checks) on the in-memory fakes: each check's
status code and the decision it drives. ``doctor`` exits 1 when a check is not ``ok``
(``cli_ops.doctor``: ``all(c.ok ...)``), so a ``FAIL`` is a failed run and ``WARN`` /
``unknown`` are not; the real-server runs are tests/integration/test_doctor.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from escalation.domain.calendars import SlaWindow, WindowUnit
from escalation.domain.errors import ErrorCode, LadderProblem
from escalation.domain.escalation import Escalation, Status
from escalation.domain.ladder import Ladder, Tier
from escalation.domain.timeutil import to_ms
from escalation.service_layer.doctor import Check, DoctorDeps, run_checks
from tests.fakes import (
    FakeAuditLog,
    FakeDeadLetterQueue,
    FakeDoctorRedis,
    FakeDoctorStore,
    FakeResyncMark,
    FakeScheduler,
    FakeServerProbe,
    pending,
    seed,
)

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
LADDER = Ladder(
    name="dispute_review", version=1,
    tiers=(Tier("standard", "Standard", 10, SlaWindow(24, WindowUnit.CALENDAR_HOURS)),
           Tier("senior", "Senior", 20, SlaWindow(48, WindowUnit.CALENDAR_HOURS))),
    terminal_tier="senior")


@dataclass
class World:
    """A consistent deployment: two escalations pending in the ledger and scheduled in
    Redis, clocks agreeing, noeviction, no standby, no ladder problem."""

    scheduler: FakeScheduler = field(default_factory=lambda: FakeScheduler(now=T0))
    log: FakeAuditLog = field(default_factory=FakeAuditLog)
    stats: dict[str, int | None] = field(default_factory=lambda: {
        "claimed": 100, "lock_contended": 0, "not_owner": 0})
    problems: list[LadderProblem] = field(default_factory=list)
    host_ms: int = to_ms(T0)

    def __post_init__(self) -> None:
        self.dead = FakeDeadLetterQueue(self.scheduler)
        self.probe = FakeServerProbe(redis_ms=self.host_ms, db_ms=self.host_ms)
        self.resync = FakeResyncMark(self.scheduler)
        self.ids = [self.seed(T0 + timedelta(hours=h)) for h in (1, 2)]

    def seed(self, due: datetime) -> UUID:
        return seed(self.log, self.scheduler, pending(LADDER, "standard", due)).dispute_id

    def checks(self) -> dict[str, Check]:
        deps = DoctorDeps(FakeDoctorStore(self.log), FakeDoctorRedis(self.scheduler, self.dead),
                          self.probe, lambda: self.stats, lambda: list(self.problems),
                          self.resync)
        return {c.name: c for c in run_checks(deps, host_ms=lambda: self.host_ms)}

    def failed(self) -> set[str]:
        """The checks that make ``doctor`` exit 1."""
        return {n for n, c in self.checks().items() if not c.ok}


def test_a_consistent_deployment_passes_every_check_in_order() -> None:
    got = World().checks()
    assert list(got) == ["DOUBLE_ESCALATION", "CLOCK_SKEW", "STUCK_MEMBER", "LOCK_CONTENTION",
                         "ZSET_DRIFT", "REDIS_AHEAD", "DEAD_LETTERS", "MAXMEMORY_POLICY",
                         "LADDER_FILES", "PG_REPLICATION"]
    assert {n: c.status for n, c in got.items() if c.status != "ok"} == {}
    assert all(c.advice == "" for c in got.values())
    assert "PostgreSQL pending 2, Redis ZSET 2" in got["ZSET_DRIFT"].detail


def test_double_escalation_fails_on_two_decisions_out_of_one_tier() -> None:
    w = World()
    state = w.log.states[w.ids[0]]
    w.log.append(state, "PROMOTED", "worker-a", T0, tier="senior")
    assert "DOUBLE_ESCALATION" not in w.failed()  # one decision out of standard
    # a second worker decides from the same standard-tier state (a lost claim)
    w.log.append(state, "PROMOTED", "worker-b", T0, tier="senior")
    check = w.checks()["DOUBLE_ESCALATION"]
    assert (check.status, check.detail) == ("FAIL", "1 dispute(s) decided twice out of one tier")
    assert "escalation audit verify" in check.advice


@pytest.mark.parametrize(("redis_off", "db_off", "status"), [
    (1000, 0, "ok"),      # at the limit (1000 ms, round trip 0)
    (1001, 0, "FAIL"),    # host-redis over it
    (0, -1001, "FAIL"),   # host-db over it
    (600, -600, "FAIL"),  # each within, but redis-db 1200 ms apart
])
def test_clock_skew_limits_each_pair_of_clocks(redis_off: int, db_off: int, status: str) -> None:
    w = World()
    w.probe.redis_ms, w.probe.db_ms = w.host_ms + redis_off, w.host_ms + db_off
    check = w.checks()["CLOCK_SKEW"]
    assert check.status == status
    assert ("NTP" in check.advice) == (status == "FAIL")


def test_stuck_member_fails_on_a_scheduled_member_without_payload() -> None:
    w = World()
    del w.scheduler.payloads[str(w.ids[0])]
    check = w.checks()["STUCK_MEMBER"]
    assert check.status == "FAIL" and str(w.ids[0]) in check.detail
    assert "escalation reconcile" in check.advice


@pytest.mark.parametrize(("contended", "not_owner", "status"), [
    (20, 0, "ok"),    # 20 % of 100 claims: the limit (CONTENTION_RATIO)
    (21, 0, "FAIL"),  # above it
    (0, 1, "FAIL"),   # a lease expired mid-flight, however low the contention
])
def test_lock_contention_fails_over_the_ratio_or_on_a_lost_lease(
        contended: int, not_owner: int, status: str) -> None:
    w = World()
    w.stats.update(lock_contended=contended, not_owner=not_owner)
    check = w.checks()["LOCK_CONTENTION"]
    assert check.status == status
    assert ("lock_ttl_s" in check.advice) == (status == "FAIL")


def test_zset_drift_fails_when_redis_and_the_ledger_disagree() -> None:
    w = World()
    del w.scheduler.scores[str(w.ids[0])]  # pending in PostgreSQL, not scheduled
    got = w.checks()["ZSET_DRIFT"]
    assert got.status == "FAIL" and "PostgreSQL pending 2, Redis ZSET 1" in got.detail
    assert "escalation reconcile --dry-run" in got.advice

    w = World()  # scheduled in Redis, ended in PostgreSQL
    state = w.log.states[w.ids[0]]
    w.log.append(state, "CANCELLED", "jane", T0, status=Status.CANCELLED)
    got = w.checks()["ZSET_DRIFT"]
    assert got.status == "FAIL" and "members not pending in PostgreSQL 1" in got.detail


def test_a_dead_lettered_decision_is_no_drift_but_a_dead_letter() -> None:
    w = World()
    w.scheduler.advance(timedelta(hours=1))
    [item] = w.scheduler.claim(10, 30_000, "worker-a").items
    member = str(item.escalation.dispute_id)
    assert w.dead.dead_letter_decision(member, item.token, json.dumps({"reason": "x"}))
    got = w.checks()
    # Redis ZSET 1 + dead-lettered 1 == PostgreSQL pending 2
    assert got["ZSET_DRIFT"].status == "ok"
    assert got["DEAD_LETTERS"].status == "FAIL"
    assert got["DEAD_LETTERS"].detail == ("dead-lettered escalations 1, undelivered "
                                          "notifications 0")
    assert "escalation dead retry" in got["DEAD_LETTERS"].advice


def test_an_undelivered_notification_is_a_dead_letter() -> None:
    w = World()
    w.dead.add_notification("review|x:2", to_ms(T0), {"reason": "webhook 500"})
    got = w.checks()["DEAD_LETTERS"]
    assert got.status == "FAIL" and got.detail.endswith("undelivered notifications 1")


def test_redis_ahead_fails_on_the_resync_mark() -> None:
    w = World()
    w.resync.mark_resync("restored", "db upgrade --restored")
    check = w.checks()["REDIS_AHEAD"]
    assert check.status == "FAIL"
    assert check.detail.startswith("resync mark set (restored: db upgrade --restored)")
    assert "escalation reconcile" in check.advice
    w.resync.clear_resync()
    assert "REDIS_AHEAD" not in w.failed()


def test_redis_ahead_fails_on_a_payload_ahead_of_the_ledger() -> None:
    w = World()
    member = str(w.ids[1])
    esc: Escalation = w.scheduler.payloads[member]
    w.scheduler.payloads[member] = esc.with_changes(seq=esc.seq + 1)  # a decision lost in PG
    check = w.checks()["REDIS_AHEAD"]
    assert check.status == "FAIL"
    assert f"1 scheduled member(s) ahead of the ledger, e.g. ['{member}']" in check.detail
    assert w.failed() == {"REDIS_AHEAD"}  # still pending on both sides: no drift


@pytest.mark.parametrize(("policy", "status"), [
    ("noeviction", "ok"), ("allkeys-lru", "FAIL"), (None, "unknown")])
def test_maxmemory_policy(policy: str | None, status: str) -> None:
    w = World()
    w.probe.policy = policy
    check = w.checks()["MAXMEMORY_POLICY"]
    assert check.status == status
    assert check.ok == (status != "FAIL")  # unknown never fails the run


def test_a_missing_ladder_release_fails_with_the_restore_advice() -> None:
    w = World()
    w.problems.append(LadderProblem(ErrorCode.RELEASE_BROKEN,
                                    "dispute_review@1: released file missing"))
    check = w.checks()["LADDER_FILES"]
    assert check.status == "FAIL"
    assert check.detail.startswith("1 broken release(s), 0 invalid ladder file(s)")
    assert "restore each released file" in check.advice


def test_an_invalid_unreleased_ladder_file_fails_with_the_fix_advice() -> None:
    w = World()
    w.problems.append(LadderProblem(ErrorCode.LADDER_INVALID, "x.v2.toml: tiers: empty"))
    check = w.checks()["LADDER_FILES"]
    assert check.status == "FAIL" and check.detail.startswith("0 broken release(s), 1 invalid")
    assert check.advice.startswith("fix the file")


@pytest.mark.parametrize(("replica", "status", "ok"), [
    ({"in_recovery": False, "synchronous_standby_names": "",
      "standbys": [("replica", "async")]}, "WARN", True),
    ({"in_recovery": False, "synchronous_standby_names": "replica",
      "standbys": [("replica", "sync")]}, "ok", True),
    ({"in_recovery": True, "synchronous_standby_names": "", "standbys": []}, "FAIL", False),
    (None, "unknown", True),
])
def test_pg_replication_warns_on_an_async_standby_and_fails_on_a_standby(
        replica: dict[str, object] | None, status: str, ok: bool) -> None:
    w = World()
    w.probe.replica = replica
    check = w.checks()["PG_REPLICATION"]
    assert (check.status, check.ok) == (status, ok)
    assert ("PG_REPLICATION" in w.failed()) == (not ok)
