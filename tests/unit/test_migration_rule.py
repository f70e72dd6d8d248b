"""The ladder migration's per-dispute seq guard (``domain.migration_rule``), without a
database: hand cases for each branch, and a property over generated batches."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

from escalation.domain.escalation import Status
from escalation.domain.ladder_plan import Blocked, DuePlan, DueRule, PlanItem
from escalation.domain.migration_rule import LockedHead, Planned, check_batch
from tests.unit.property_budget import examples

T0 = datetime(2026, 3, 2, 12, tzinfo=UTC)
TARGET = 3


def _item(did: UUID, seq: int = 4, status: Status = Status.PENDING,
          due: DuePlan | None = None, to_tier: str = "t2") -> PlanItem:
    return PlanItem(dispute_id=did, seq=seq, status=status, from_version=2, to_version=TARGET,
                    from_tier="t1", to_tier=to_tier, old_next="t2", new_next="t3",
                    due=due or DuePlan(DueRule.KEEP, T0))


def _head(seq: int = 4, status: Status = Status.PENDING, version: int = 2) -> LockedHead:
    return LockedHead(status, seq, version)


def _no_replan(did: UUID) -> Planned | Blocked:
    raise AssertionError(f"{did} re-planned although its row did not move")


def test_an_unmoved_row_is_migrated_as_planned() -> None:
    did = uuid.uuid4()
    item = _item(did)
    out = check_batch([(item, T0)], {did: _head()}, TARGET, _no_replan)
    assert out.moves == [(item, T0)]
    assert (out.replanned, out.skipped, out.blocked, out.suppressed) == (0, 0, [], 0)


def test_gone_closed_or_already_migrated_rows_are_skipped() -> None:
    gone, closed, done, above = (uuid.uuid4() for _ in range(4))
    locked = {closed: _head(status=Status.TERMINAL), done: _head(version=TARGET),
              above: _head(version=TARGET + 1)}
    batch = [(_item(d), T0) for d in (gone, closed, done, above)]
    out = check_batch(batch, locked, TARGET, _no_replan)
    assert (out.moves, out.skipped) == ([], 4)


def test_a_paused_row_is_still_migrated() -> None:
    did = uuid.uuid4()
    item = _item(did, status=Status.PAUSED)
    out = check_batch([(item, None)], {did: _head(status=Status.PAUSED)}, TARGET, _no_replan)
    assert out.moves == [(item, None)]


def test_a_moved_seq_or_status_is_replanned_from_the_locked_row() -> None:
    by_seq, by_status = uuid.uuid4(), uuid.uuid4()
    again = {d: _item(d, seq=5, to_tier="t3") for d in (by_seq, by_status)}
    asked: list[UUID] = []

    def replan(did: UUID) -> Planned | Blocked:
        asked.append(did)
        return again[did], T0 + timedelta(hours=1)

    locked = {by_seq: _head(seq=5), by_status: _head(status=Status.PAUSED)}
    out = check_batch([(_item(by_seq), T0), (_item(by_status), T0)], locked, TARGET, replan)
    assert asked == [by_seq, by_status]
    assert out.moves == [(again[by_seq], T0 + timedelta(hours=1)),
                         (again[by_status], T0 + timedelta(hours=1))]
    assert out.replanned == 2


def test_a_replan_that_is_blocked_is_left_on_its_version() -> None:
    did = uuid.uuid4()
    blocked = Blocked(did, 5, 2, "t1", "tier t1 has no mapping")
    out = check_batch([(_item(did), T0)], {did: _head(seq=5)}, TARGET, lambda _d: blocked)
    assert (out.moves, out.replanned, out.blocked) == ([], 1, [blocked])


def test_a_due_time_set_by_the_grace_floor_is_counted_suppressed() -> None:
    did = uuid.uuid4()
    floor = DuePlan(DueRule.FLOOR, T0 + timedelta(hours=8), T0 + timedelta(hours=1))
    at_floor, kept = T0 + timedelta(hours=4), T0 + timedelta(hours=8)
    out = check_batch([(_item(did, due=floor), at_floor)], {did: _head()}, TARGET, _no_replan)
    assert out.suppressed == 1
    out = check_batch([(_item(did, due=floor), kept)], {did: _head()}, TARGET, _no_replan)
    assert out.suppressed == 0


_STATUSES = st.sampled_from(list(Status))


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), _STATUSES, st.integers(1, 4), st.booleans(),
                          st.integers(0, 6), _STATUSES),
                min_size=0, max_size=12))
def test_every_item_is_counted_once_and_only_open_rows_below_the_target_move(
    rows: list[tuple[int, Status, int, bool, int, Status]],
) -> None:
    batch: list[Planned] = []
    locked: dict[UUID, LockedHead] = {}
    replanned: set[UUID] = set()
    for seq, status, version, present, planned_seq, planned_status in rows:
        did = uuid.uuid4()
        batch.append((_item(did, seq=planned_seq, status=planned_status), T0))
        if present:
            locked[did] = LockedHead(status, seq, version)

    def replan(did: UUID) -> Planned | Blocked:
        replanned.add(did)
        head = locked[did]
        if head.status is Status.PAUSED:
            return Blocked(did, head.last_seq, head.ladder_version, "t1", "paused")
        return _item(did, seq=head.last_seq, status=head.status), T0

    out = check_batch(batch, locked, TARGET, replan)
    assert len(out.moves) + out.skipped + len(out.blocked) == len(batch)
    assert out.replanned == len(replanned)
    for item, _due in out.moves:
        head = locked[item.dispute_id]
        assert head.status in (Status.PENDING, Status.PAUSED)
        assert head.ladder_version < TARGET
        assert (item.seq, item.status) == (head.last_seq, head.status)  # never a stale plan
    assert [i.dispute_id for i, _ in out.moves] == [
        i.dispute_id for i, _ in batch if i.dispute_id in {m.dispute_id for m, _ in out.moves}]
