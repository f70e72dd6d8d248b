"""``ladder plan`` and ``ladder apply`` (service_layer.ladder_migration) on the in-memory
fakes: a ladder directory in a temporary folder (the real catalog), the release and run
history, projection and ledger of tests/fakes.py (FakeLadderHistory over a FakeAuditLog) and
a FakeScheduler. Plan, then apply with the hash it printed; the seq guard re-plans an
escalation a worker decided between the page read and the batch's lock; a failed run
resumes; what is refused writes nothing. Against PostgreSQL and Redis:
tests/integration/test_ladder_apply.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import pytest

from escalation.adapters.ladder_files import LadderCatalog
from escalation.domain.calendars import builtin_calendars
from escalation.domain.errors import (
    ErrorCode,
    LadderMigrationError,
    LadderVersionNotFound,
    LadderVersionSuperseded,
    UnknownPlanHash,
    code_of,
)
from escalation.domain.escalation import Status
from escalation.domain.ladder_plan import DueRule
from escalation.domain.timeutil import to_ms
from escalation.ports import MigrationBatch, NewRelease
from escalation.service_layer.ladder_migration import (
    ApplyHooks,
    ApplyMigration,
    ApplyReport,
    LadderPorts,
    PlanMigration,
    apply_migration,
    plan_migration,
)
from tests.fakes import FakeAuditLog, FakeLadderHistory, FakeScheduler, pending, seed

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]
V1 = (ROOT / "ladders" / "dispute_review.v1.toml").read_text().replace(
    '"dispute_review"', '"toy"')
# v2 lengthens the senior window from 48 to 60 calendar hours (standard and compliance keep
# theirs) and re-times from the tier entry: a senior escalation's due time is recomputed
# later, the others keep theirs
V2 = V1.replace("version = 1\n", "version = 2\nprevious_version = 1\n").replace(
    "amount = 48", "amount = 60") + '\n[migration]\nrecompute_due = "from_tier_entry"\n'
CALS = builtin_calendars()


class World:
    """Two released versions of ``toy``, and a senior and a standard escalation on v1."""

    def __init__(self, tmp_path: Path) -> None:
        for name, text in {"toy.v1": V1, "toy.v2": V2}.items():
            (tmp_path / f"{name}.toml").write_text(text)
        self.files = LadderCatalog.from_dir(tmp_path, strict=False)
        self.log = FakeAuditLog()
        self.history = FakeLadderHistory(log=self.log)
        for version in (1, 2):
            found = self.files.find("toy", version)
            assert found is not None
            self.history.release(NewRelease(ladder="toy", version=version, checksum=found.checksum,
                                            released_by="jane", reason="CHG-1", released_at=T0))
        self.scheduler = FakeScheduler(now=T0)
        self.ports = LadderPorts(history=self.history, scheduler=self.scheduler,
                                 ladders=self.files, calendars=CALS)
        v1 = self.files.find("toy", 1)
        assert v1 is not None
        # senior since T0 - 10 h: due 48 h later under v1, T0 + 38 h
        self.senior = seed(self.log, self.scheduler, pending(
            v1, "senior", T0 + timedelta(hours=38), entered_tier_at=T0 - timedelta(hours=10)))
        self.standard = seed(self.log, self.scheduler, pending(
            v1, "standard", T0 + timedelta(hours=5), entered_tier_at=T0 - timedelta(hours=19)))

    def apply(self, plan_hash: str, *, batch_size: int = 500,
              hooks: ApplyHooks | None = None) -> ApplyReport:
        return apply_migration(ApplyMigration(ladder="toy", to_version=2, plan_hash=plan_hash,
                                              actor="jane", reason="CHG-2",
                                              batch_size=batch_size),
                               self.ports, hooks or ApplyHooks())

    def migrated_rows(self, dispute_id: UUID) -> int:
        return self.log.events(dispute_id).count("LADDER_MIGRATED")


def test_plan_writes_nothing_and_apply_moves_each_escalation_once(tmp_path: Path) -> None:
    w = World(tmp_path)
    plan = plan_migration(PlanMigration(ladder="toy", to_version=2), w.ports)
    assert w.history.runs == [] and len(w.log.ledger) == 2  # a dry run
    items = {i.dispute_id: i for i in plan.items}
    assert set(items) == {w.senior.dispute_id, w.standard.dispute_id}
    senior = items[w.senior.dispute_id]
    assert senior.due.rule is DueRule.RECOMPUTED
    # entered senior at T0 - 10 h; the v2 window of 60 h ends at T0 + 50 h (was T0 + 38 h)
    assert senior.due.recomputed == T0 + timedelta(hours=50)
    assert items[w.standard.dispute_id].due.rule is DueRule.KEEP

    report = w.apply(plan.plan_hash)
    assert (report.planned, report.migrated, report.replanned, report.unchanged) == (2, 2, 0, 0)
    after = w.log.states[w.senior.dispute_id]
    assert (after.ladder_version, after.tier, after.seq) == (2, "senior", 2)
    assert after.due_at == T0 + timedelta(hours=50)
    assert w.log.states[w.standard.dispute_id].due_at == T0 + timedelta(hours=5)  # kept
    member = str(w.senior.dispute_id)
    assert w.scheduler.payloads[member].ladder_version == 2
    assert w.scheduler.scores[member] == to_ms(T0 + timedelta(hours=50))
    row = w.log.trail(w.senior.dispute_id)[-1]
    assert (row.event, row.actor, row.details["from_version"], row.details["to_version"]) == (
        "LADDER_MIGRATED", "jane", 1, 2)
    assert "CHG-2" in str(row.details["reason"])
    [run] = w.history.runs
    assert (run.status, run.migrated, run.plan_hash) == ("done", 2, plan.plan_hash)

    again = w.apply(plan.plan_hash)  # the same hash once more: nothing to do
    assert again.already_applied is not None and "already applied" in \
        again.already_applied_message()
    assert [w.migrated_rows(d) for d in (w.senior.dispute_id, w.standard.dispute_id)] == [1, 1]
    assert len(w.history.runs) == 1


def test_a_hash_that_names_another_change_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    w = World(tmp_path)
    with pytest.raises(UnknownPlanHash, match="unknown plan hash 'ab12'"):
        w.apply("ab12")
    assert w.history.runs == [] and len(w.log.ledger) == 2
    assert w.log.states[w.senior.dispute_id].ladder_version == 1


def test_an_unreleased_target_or_a_bad_batch_size_is_refused(tmp_path: Path) -> None:
    w = World(tmp_path)
    with pytest.raises(LadderVersionNotFound, match="version 3 has no file") as missing:
        plan_migration(PlanMigration(ladder="toy", to_version=3), w.ports)
    assert code_of(missing.value) is ErrorCode.NOT_FOUND and missing.value.exit_code == 3
    plan = plan_migration(PlanMigration(ladder="toy", to_version=2), w.ports)
    with pytest.raises(LadderMigrationError, match="batch size must be 1-5000, got 0"):
        w.apply(plan.plan_hash, batch_size=0)
    assert w.history.runs == [] and len(w.log.ledger) == 2


def test_the_seq_guard_replans_what_a_worker_decided_and_skips_what_it_closed(
    tmp_path: Path,
) -> None:
    """Between the page read (planned at seq 1) and the batch's lock a worker promotes the
    senior escalation (seq 2) and the standard one is cancelled: the first is re-planned from
    its locked row and migrated from there, the second is left alone."""
    w = World(tmp_path)
    plan = plan_migration(PlanMigration(ladder="toy", to_version=2), w.ports)

    def worker_decides(batch: MigrationBatch) -> None:
        assert {i.seq for i, _ in batch.items} == {1}
        senior = w.log.states[w.senior.dispute_id]
        w.log.append(senior, "PROMOTED", "w1", T0, tier="compliance",
                     entered_tier_at=T0, due_at=T0 + timedelta(hours=72))
        w.log.append(w.log.states[w.standard.dispute_id], "CANCELLED", "admin", T0,
                     status=Status.CANCELLED)
        w.history.before_batch = None

    w.history.before_batch = worker_decides
    report = w.apply(plan.plan_hash)
    assert (report.migrated, report.replanned, report.unchanged) == (1, 1, 1)
    after = w.log.states[w.senior.dispute_id]
    # re-planned at compliance (whose 72 h window v2 keeps): version 2, due time kept
    assert (after.tier, after.ladder_version, after.seq) == ("compliance", 2, 3)
    assert after.due_at == T0 + timedelta(hours=72)
    assert w.log.events(w.senior.dispute_id) == ["ENQUEUED", "PROMOTED", "LADDER_MIGRATED"]
    assert w.log.events(w.standard.dispute_id) == ["ENQUEUED", "CANCELLED"]
    assert w.log.states[w.standard.dispute_id].ladder_version == 1


def test_a_failed_run_resumes_with_the_same_hash_and_migrates_nothing_twice(
    tmp_path: Path,
) -> None:
    w = World(tmp_path)
    plan = plan_migration(PlanMigration(ladder="toy", to_version=2), w.ports)

    def crash(stage: str, index: int) -> None:
        if (stage, index) == ("after_record", 0):
            raise RuntimeError("crash after the first batch committed")

    with pytest.raises(RuntimeError, match="crash after"):
        w.apply(plan.plan_hash, batch_size=1, hooks=ApplyHooks(hook=crash))
    [run] = w.history.runs
    assert (run.status, run.migrated) == ("failed", 1)
    first = min(w.senior.dispute_id, w.standard.dispute_id)  # pages go in dispute-id order
    assert w.scheduler.payloads[str(first)].ladder_version == 1  # Redis never saw it

    report = w.apply(plan.plan_hash, batch_size=1)
    assert report.resumed and report.run_id == run.run_id
    assert report.redis_repaired == 1  # the committed batch restored into Redis first
    assert (report.migrated, w.history.runs[0].status) == (1, "done")
    assert [w.migrated_rows(d) for d in (w.senior.dispute_id, w.standard.dispute_id)] == [1, 1]
    assert all(e.ladder_version == 2 for e in w.scheduler.payloads.values())


def test_a_version_below_the_applied_one_is_refused(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.apply(plan_migration(PlanMigration(ladder="toy", to_version=2), w.ports).plan_hash)
    with pytest.raises(LadderVersionSuperseded, match="already migrated to version 2"):
        plan_migration(PlanMigration(ladder="toy", to_version=1), w.ports)

