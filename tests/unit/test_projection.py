"""domain.projection: the projection a ledger determines, column by column (pure)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from escalation.domain.projection import (
    ColumnDifference,
    LedgerStep,
    ProjectionColumn,
    ProjectionRow,
    compare_projection,
)

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
DID = uuid.UUID("3f0c6e2a-9b1d-4c8e-a5f7-2d4b6c8e0a13")
CAP = T0 + timedelta(days=10)
NOTICE = T0 + timedelta(days=45)


def _step(seq: int, event: str, **kw: Any) -> LedgerStep:
    base: dict[str, Any] = {
        "seq": seq, "event": event, "to_tier": None, "next_due_at": None,
        "regulatory_deadline": NOTICE, "ladder": "reg_e", "ladder_version": 1,
        "materiality": Decimal("1250.00"), "trace_id": "t-1", "source_hash": "ab",
        "external_id": None, "details": {}}
    base.update(kw)
    return LedgerStep(**base)


def _chain() -> list[LedgerStep]:
    """ENQUEUED (two clocks) -> PROMOTED to senior -> a provisional credit that ends the
    10-day clock and places a notice clock."""
    return [
        _step(1, "ENQUEUED", to_tier="standard", next_due_at=T0 + timedelta(days=2),
              details={"deadlines": {"ten_day": CAP.isoformat(),
                                     "forty_five_day": NOTICE.isoformat()}}),
        _step(2, "PROMOTED", to_tier="senior", next_due_at=T0 + timedelta(days=4)),
        _step(3, "ACTION_RECORDED", to_tier="senior", next_due_at=T0 + timedelta(days=5),
              regulatory_deadline=NOTICE,
              details={"clocks": {"ten_day": {"at": CAP.isoformat()},
                                  "forty_five_day": {"at": NOTICE.isoformat()},
                                  "notice": {"at": None, "rule": "2 business days"}},
                       "binding": ["forty_five_day"]}),
    ]


def _row(**kw: Any) -> ProjectionRow:
    base: dict[str, Any] = {
        "dispute_id": DID, "status": "pending", "tier": "senior",
        "due_at": T0 + timedelta(days=5), "materiality": Decimal("1250.00"), "ladder": "reg_e",
        "ladder_version": 1, "regulatory_deadline": NOTICE, "trace_id": "t-1",
        "source_hash": "ab", "external_id": None,
        "deadlines": {"forty_five_day": NOTICE},
        "obligations": {"ten_day": CAP, "forty_five_day": NOTICE}}
    base.update(kw)
    return ProjectionRow(**base)


def test_a_projection_that_agrees_with_its_ledger_has_no_difference() -> None:
    assert compare_projection(_row(), _chain()) == ()


@pytest.mark.parametrize(("change", "column"), [
    ({"tier": "compliance"}, ProjectionColumn.TIER),
    ({"due_at": T0 + timedelta(days=35)}, ProjectionColumn.DUE_AT),
    ({"deadlines": {}}, ProjectionColumn.DEADLINES),
    ({"deadlines": None}, ProjectionColumn.DEADLINES),
    ({"obligations": {"ten_day": CAP}}, ProjectionColumn.OBLIGATIONS),
    ({"materiality": Decimal("1.00")}, ProjectionColumn.MATERIALITY),
    ({"regulatory_deadline": None}, ProjectionColumn.REGULATORY_DEADLINE),
    ({"ladder_version": 2}, ProjectionColumn.LADDER_VERSION),
    ({"external_id": "CASE-1"}, ProjectionColumn.EXTERNAL_ID),
], ids=lambda v: v.value if isinstance(v, ProjectionColumn) else "")
def test_each_edited_column_is_reported_by_name(change: dict[str, Any],
                                                column: ProjectionColumn) -> None:
    found = compare_projection(_row(**change), _chain())
    assert [d.column for d in found] == [column]
    assert found[0].projection == next(iter(change.values()))


def test_a_status_edit_names_status_and_the_due_time_it_dropped() -> None:
    found = compare_projection(_row(status="cancelled", due_at=None), _chain())
    assert found == (
        ColumnDifference(ProjectionColumn.STATUS, "cancelled", "pending"),
        ColumnDifference(ProjectionColumn.DUE_AT, None, T0 + timedelta(days=5)))
    assert found[0].render() == "status (projection 'cancelled', ledger 'pending')"
    assert found[1].render() == ("due_at (projection none, ledger "
                                 "2026-03-07T09:00:00+00:00)")


def test_the_deadline_map_is_rendered_by_name() -> None:
    (diff,) = compare_projection(_row(deadlines={}), _chain())
    assert diff.render() == ("deadlines (projection {}, ledger "
                             "{forty_five_day: 2026-04-16T09:00:00+00:00})")


def test_status_follows_every_event_that_sets_it() -> None:
    paused = [*_chain(), _step(4, "PAUSED", to_tier="senior")]
    assert compare_projection(_row(status="paused", due_at=None), paused) == ()
    resumed = [*paused, _step(5, "RESUMED", to_tier="senior", next_due_at=T0)]
    assert compare_projection(_row(due_at=T0), resumed) == ()
    terminal = [*resumed, _step(6, "TERMINAL")]  # a terminal decision names no tier
    assert compare_projection(_row(status="terminal", due_at=None), terminal) == ()
    resolved = [*terminal, _step(7, "RESOLVED", details={
        "clocks": {"ten_day": {"at": CAP.isoformat()}}})]
    assert compare_projection(_row(status="resolved", due_at=None, deadlines=None,
                                   obligations={"ten_day": CAP}), resolved) == ()
    assert [d.column for d in compare_projection(
        _row(status="terminal", due_at=None, deadlines=None, obligations={"ten_day": CAP}),
        resolved)] == [ProjectionColumn.STATUS]


def test_purging_a_dead_lettered_decision_cancels_and_another_purge_does_not() -> None:
    other = [*_chain(), _step(4, "PURGED", to_tier="senior",
                              next_due_at=T0 + timedelta(days=5),
                              details={"member": "notify:1-0"})]
    assert compare_projection(_row(), other) == ()
    decision = [*_chain(), _step(4, "PURGED", to_tier="senior",
                                 details={"member": f"decision:{DID}"})]
    assert compare_projection(_row(status="cancelled", due_at=None), decision) == ()


def test_clocks_the_ledger_does_not_record_are_not_compared() -> None:
    """An action row without ``clocks`` (older than the obligations) leaves deadlines and
    obligations undetermined; a chain without ENQUEUED deadlines expects none."""
    chain = _chain()
    old = [*chain[:2], dataclasses.replace(chain[2], details={})]
    assert compare_projection(_row(deadlines={}, obligations=None), old) == ()
    plain = [_step(1, "ENQUEUED", to_tier="standard", next_due_at=T0)]
    assert compare_projection(_row(tier="standard", due_at=T0, deadlines=None,
                                   obligations=None), plain) == ()
    assert [d.column for d in compare_projection(
        _row(tier="standard", due_at=T0, deadlines=None, obligations={}), plain)] == [
        ProjectionColumn.OBLIGATIONS]


def test_no_ledger_rows_say_nothing() -> None:
    assert compare_projection(_row(tier="anything"), []) == ()
