"""Recurring maintenance (service_layer.maintenance) on the in-memory lease and run table:
each occurrence of a job runs once, only while leading (or forced), skipped occurrences are
counted not replayed, and a failing job is recorded as failed without stopping the rest."""

from __future__ import annotations

from typing import Any

from escalation.service_layer.maintenance import Job, Maintenance, poll_safely
from tests.fakes import FakeLease, FakeMaintenanceRuns

HOUR_MS = 3_600_000
T0_MS = 1_772_452_800_000  # 2026-03-02T12:00:00Z, an hour boundary


class Counter:
    """A job body that counts its runs."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self) -> dict[str, Any]:
        self.runs += 1
        return {"n": self.runs}


def _maintenance(lease: FakeLease, *jobs: Job) -> tuple[Maintenance, FakeMaintenanceRuns]:
    runs = FakeMaintenanceRuns()
    return Maintenance(runs=runs, lease=lease, jobs=list(jobs), actor="w1"), runs


def test_each_occurrence_runs_once_however_often_it_is_ticked() -> None:
    body = Counter()
    m, runs = _maintenance(FakeLease(T0_MS), Job("reconcile", 3600, body))
    assert m.tick() == ["reconcile"]
    assert m.tick(T0_MS + HOUR_MS - 1) == []  # the same occurrence
    assert m.tick(T0_MS + HOUR_MS) == ["reconcile"]  # the next one
    assert body.runs == 2
    assert [(job, status) for job, status, _ in runs.finished] == [("reconcile", "ok")] * 2
    assert runs.finished[0][2]["n"] == 1 and runs.finished[0][2]["missed"] == 0


def test_after_downtime_a_job_runs_once_and_counts_the_skipped_occurrences() -> None:
    body = Counter()
    m, runs = _maintenance(FakeLease(T0_MS), Job("partitions", 3600, body))
    m.tick()
    assert m.tick(T0_MS + 5 * HOUR_MS) == ["partitions"]
    assert body.runs == 2 and runs.finished[-1][2]["missed"] == 4


def test_a_process_that_does_not_lead_runs_nothing_unless_forced() -> None:
    body = Counter()
    m, runs = _maintenance(FakeLease(T0_MS, leader=False), Job("reconcile", 3600, body))
    assert m.poll() == [] and m.tick() == []
    assert body.runs == 0 and runs.last == {}
    assert m.tick(force=True) == ["reconcile"]  # `maintenance run`: the claim still guards
    assert m.tick(force=True) == []


def test_a_failing_job_is_recorded_failed_and_the_next_job_still_runs() -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("partition DDL refused")

    after = Counter()
    m, runs = _maintenance(FakeLease(T0_MS), Job("partitions", 3600, broken),
                           Job("dead_letters", 3600, after))
    assert m.tick() == ["partitions", "dead_letters"]
    job, status, details = runs.finished[0]
    assert (job, status, details["error"]) == ("partitions", "failed", "partition DDL refused")
    assert after.runs == 1


def test_poll_checks_the_table_at_most_every_check_interval() -> None:
    lease = FakeLease(T0_MS)
    body = Counter()
    m, _ = _maintenance(lease, Job("reconcile", 60, body))
    m.check_every_s = 10.0
    assert m.poll() == ["reconcile"]
    lease.now_ms_at += 60_000  # the next occurrence is due ...
    lease.monotonic += 5.0
    assert m.poll() == []  # ... but the last check was 5 s ago
    lease.monotonic += 5.0
    assert m.poll() == ["reconcile"]
    assert lease.polls == 3  # the lease is renewed on every poll


def test_a_failure_of_the_poll_itself_is_not_fatal() -> None:
    class Down(FakeMaintenanceRuns):
        def claim(self, *args: Any) -> Any:
            raise ConnectionError("PostgreSQL is down")

    m = Maintenance(runs=Down(), lease=FakeLease(T0_MS), jobs=[Job("j", 60, Counter())],
                    actor="w1")
    assert poll_safely(m) == []
