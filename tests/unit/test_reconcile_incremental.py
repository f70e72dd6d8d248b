"""The incremental reconcile use case on in-memory fakes, and the sweep arithmetic."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

from escalation.domain.calendars import SlaWindow, WindowUnit, builtin_calendars
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation, Status
from escalation.domain.ladder import Ladder, Tier
from escalation.domain.reconcile_sweep import (
    ID_SPACE,
    MAX_STEP_S,
    ReconcileState,
    next_slice,
)
from escalation.ports import MemberState
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueOne, EnqueueRequest, enqueue_on_breach
from escalation.service_layer.reconcile import DiffKind
from escalation.service_layer.reconcile_incremental import (
    IncrementalPorts,
    IncrementalReconcile,
    reconcile_incremental,
)
from tests.fakes import FakeAuditLog, FakeLadders, FakeScheduler

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
LADDER = Ladder(
    name="dispute_review", version=1,
    tiers=(Tier("standard", "Standard", 10, SlaWindow(24, WindowUnit.CALENDAR_HOURS)),
           Tier("senior", "Senior", 20, SlaWindow(48, WindowUnit.CALENDAR_HOURS))),
    terminal_tier="senior")


@dataclass
class World:
    """A scheduler and audit log, with the ledger's record times kept for the watermark."""

    scheduler: FakeScheduler = field(default_factory=lambda: FakeScheduler(now=T0))
    store: FakeAuditLog = field(default_factory=FakeAuditLog)
    recorded: list[tuple[datetime, UUID]] = field(default_factory=list)
    saved: ReconcileState | None = None
    clock: datetime = T0

    def enqueue(self, dispute_id: UUID) -> Escalation:
        esc = enqueue_on_breach(
            EnqueueOne(
                request=EnqueueRequest(dispute_id=dispute_id, materiality="10.00",
                    source_hash="ab" * 32,
                           due_at=T0 + timedelta(hours=1)),
                       actor="svc", default_ladder="dispute_review"),
            CorePorts(scheduler=self.scheduler, store=self.store, ladders=FakeLadders([LADDER]),
                      calendars=builtin_calendars()),
        ).escalation
        self.recorded.append((self.clock, dispute_id))
        return esc

    # LedgerChanges
    def horizon(self) -> datetime:
        return self.clock

    def changed_since(self, since: datetime, upto: datetime,
                      chunk: int) -> Iterator[list[UUID]]:
        ids = sorted({d for at, d in self.recorded if since <= at < upto})
        for i in range(0, len(ids), chunk):
            yield ids[i:i + chunk]

    def pending_range(self, low: int, high: int, limit: int) -> Iterator[list[Escalation]]:
        rows = sorted((e for e in self.store.states.values()
                       if e.status in (Status.PENDING, Status.PAUSED)
                       and low <= e.dispute_id.int < high), key=lambda e: e.dispute_id)
        for i in range(0, len(rows), limit):
            yield rows[i:i + limit]

    # MemberSweep: the whole ZSET in one slice (the fake has no ZSCAN cursor)
    def sweep_members(self, cursors: dict[str, int],
                      fraction: float) -> tuple[list[str], dict[str, int], bool]:
        return sorted(self.scheduler.scores), {}, True

    def notified_since(self, since_ms: int, upto_ms: int,
                       chunk: int) -> Iterator[list[str]]:
        ids = sorted({e["dispute_id"] for e in self.scheduler.review})
        if ids:
            yield ids

    # SchedulerInspection
    def inspect(self, dispute_ids: Sequence[str]) -> dict[str, MemberState]:
        out = {}
        for d in dispute_ids:
            esc = self.scheduler.payloads.get(d)
            out[d] = MemberState(None if esc is None else esc.seq,
                                 self.scheduler.scores.get(d), d in self.scheduler.locks,
                                 False)
        return out

    def remove_member(self, member: str, recorded_seq: int | None, mode: str) -> str:
        self.scheduler.scores.pop(member, None)
        if mode == "remove":
            self.scheduler.payloads.pop(member, None)
        return "removed"

    def notified(self, wanted: Mapping[str, tuple[str, int]], count: int = 1000) -> set[str]:
        return set()

    def scan_shards(self, count: int = 1000) -> Iterator[list[list[tuple[str, int]]]]:
        yield [list(self.scheduler.scores.items())]

    # ReconcileStateStore
    def load(self) -> ReconcileState | None:
        return self.saved

    def save(self, state: ReconcileState) -> None:
        self.saved = state

    def database_identity(self) -> str | None:
        return "db/1"

    def now_ms(self) -> int:
        return int(self.clock.timestamp() * 1000)

    # PendingSource.pending_page for a full run
    def pending_page(self, after: UUID | None, limit: int,
                     statuses: tuple[Status, ...] = (Status.PENDING,)) -> list[Escalation]:
        rows = sorted((e for e in self.store.states.values() if e.status in statuses
                       and (after is None or e.dispute_id > after)), key=lambda e: e.dispute_id)
        return rows[:limit]

    def get_many(self, dispute_ids: list[UUID]) -> dict[UUID, Escalation]:
        return self.store.get_many(dispute_ids)

    def unapplied_decisions(self, ranges: Any) -> Any:
        return self.store.unapplied_decisions(ranges)

    def run(self, **kw: Any) -> Any:
        return reconcile_incremental(
            IncrementalReconcile(kw.pop("period_s", 3600), overlap_s=0, **kw),
            IncrementalPorts(scheduler=self.scheduler, store=self, redis_side=self,
                             changes=self, members=self, state_store=self))


def _id(high_half: bool) -> UUID:
    while True:
        u = uuid.uuid4()
        if (u.int >= ID_SPACE // 2) == high_half:
            return u


def test_the_first_run_is_full_then_only_changes_and_the_sweep_slice_are_read() -> None:
    w = World(clock=T0 - timedelta(minutes=1))
    old = w.enqueue(_id(True))
    w.clock = T0
    first = w.run()
    assert (first.mode, first.reason) == ("full", "no_state")
    assert w.saved is not None and w.saved.watermark == T0

    w.clock = T0 + timedelta(minutes=1)
    del w.scheduler.payloads[str(old.dispute_id)]  # an old drift: no ledger change
    new = w.enqueue(_id(True))
    w.clock = T0 + timedelta(minutes=5)
    del w.scheduler.payloads[str(new.dispute_id)]
    del w.scheduler.scores[str(new.dispute_id)]
    run = w.run()
    assert run.mode == "incremental" and run.changed == 1
    assert [(d.kind, d.dispute_id, d.repaired) for d in run.report.diffs] == [
        (DiffKind.MISSING, str(new.dispute_id), True)]
    assert str(new.dispute_id) in w.scheduler.payloads
    assert str(old.dispute_id) not in w.scheduler.payloads  # beyond this run's slice
    assert w.saved.watermark == w.clock
    assert 0 < w.saved.sweep_cursor < ID_SPACE // 2  # the first slices of the space


def test_the_sweep_finds_an_old_drift_within_its_period_and_wraps() -> None:
    w = World(clock=T0 - timedelta(minutes=1))
    old = w.enqueue(_id(True))
    w.clock = T0
    w.run()
    del w.scheduler.payloads[str(old.dispute_id)]
    found_after = None
    for i in range(1, 13):  # runs 5 minutes apart, a one-hour sweep
        w.clock = T0 + timedelta(minutes=5 * i)
        run = w.run()
        if any(d.dispute_id == str(old.dispute_id) and d.repaired for d in run.report.diffs):
            found_after = i
        if run.lap_completed:
            assert i == 12 and w.saved is not None and w.saved.sweep_cursor == 0
            assert w.saved.laps == 1
    assert found_after is not None and 6 <= found_after <= 12  # in the second half
    assert str(old.dispute_id) in w.scheduler.payloads


def test_a_dry_run_writes_nothing_and_a_changed_database_makes_the_run_full() -> None:
    w = World()
    w.run()
    saved = w.saved
    w.clock = T0 + timedelta(minutes=5)
    assert w.run(dry_run=True).mode == "incremental"
    assert w.saved is saved
    w.saved = ReconcileState(T0, "db/0")
    assert w.run().reason == "database_changed"
    assert w.run(full=True).reason == "asked"


def test_a_terminal_dispute_changed_since_the_watermark_loses_its_member() -> None:
    w = World(clock=T0 - timedelta(minutes=1))
    esc = w.enqueue(uuid.uuid4())
    w.clock = T0
    w.run()
    w.store.states[esc.dispute_id] = esc.with_changes(status=Status.CANCELLED, due_at=None,
                                                      seq=2)
    w.recorded.append((T0 + timedelta(minutes=1), esc.dispute_id))
    w.clock = T0 + timedelta(minutes=5)
    run = w.run()
    assert [(d.kind, d.repaired) for d in run.report.diffs] == [
        (DiffKind.TERMINAL_MEMBER, True)]
    assert str(esc.dispute_id) not in w.scheduler.scores


def test_the_slice_covers_the_space_in_period_over_interval_runs() -> None:
    state = ReconcileState(T0, None, sweep_at_ms=0)
    covered = 0
    for _ in range(6):
        part = next_slice(state, 300_000, 1800)
        covered += part.high - part.low
        state = ReconcileState(T0, None, sweep_cursor=0 if part.wraps else part.high,
                               sweep_at_ms=0)
    assert part.wraps and covered >= ID_SPACE
    # a long pause counts as at most MAX_STEP_S
    assert next_slice(ReconcileState(T0, None, sweep_at_ms=0), 10**9, 1800).fraction == \
        MAX_STEP_S / 1800


@pytest.mark.parametrize("kw,field_name", [({"sweep_period_s": 10}, "sweep_period_s"),
                                           ({"sweep_period_s": 3600, "page": 0}, "page"),
                                           ({"sweep_period_s": 3600, "overlap_s": -1},
                                            "overlap_s")])
def test_bad_input_names_the_field(kw: dict[str, int], field_name: str) -> None:
    with pytest.raises(InvalidInput, match=field_name):
        IncrementalReconcile(**kw)
