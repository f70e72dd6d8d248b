"""``cancel`` (service_layer.cancel) on the in-memory fakes: the CANCELLED row is recorded
before Redis lets go, a decision recorded but never applied is notified with the removal
(exactly once), and every refusal writes nothing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from escalation.domain.calendars import SlaWindow, WindowUnit
from escalation.domain.errors import ConflictError, InvalidInput, NotFound
from escalation.domain.escalation import Status
from escalation.domain.ladder import Ladder, Tier
from escalation.service_layer.cancel import cancel
from tests.fakes import FakeAuditLog, FakeScheduler, pending, seed

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
LADDER = Ladder(
    name="dispute_review", version=1,
    tiers=(Tier("standard", "Standard", 10, SlaWindow(24, WindowUnit.CALENDAR_HOURS)),
           Tier("senior", "Senior", 20, SlaWindow(48, WindowUnit.CALENDAR_HOURS))),
    terminal_tier="senior")


@pytest.fixture()
def world() -> tuple[FakeScheduler, FakeAuditLog]:
    return FakeScheduler(now=T0), FakeAuditLog()


def test_cancel_records_then_removes_everything_from_redis(
    world: tuple[FakeScheduler, FakeAuditLog],
) -> None:
    scheduler, store = world
    state = seed(store, scheduler, pending(LADDER, "standard", T0 + timedelta(hours=2)))
    did = state.dispute_id

    out = cancel(str(did), scheduler=scheduler, store=store, actor="jane", reason="resolved")

    assert out.status is Status.CANCELLED and out.seq == state.seq + 1
    assert store.events(did) == ["ENQUEUED", "CANCELLED"]
    row = store.trail(did)[-1]
    assert row.actor == "jane" and row.details == {"reason": "resolved"}
    assert row.decided_at == T0  # the scheduler's clock (Redis TIME), not the host's
    assert str(did) not in scheduler.scores and str(did) not in scheduler.payloads
    assert scheduler.review == []  # nothing was decided: nothing to notify


def test_a_decision_recorded_but_never_applied_is_notified_once_by_the_cancel(
    world: tuple[FakeScheduler, FakeAuditLog],
) -> None:
    scheduler, store = world
    state = seed(store, scheduler, pending(LADDER, "standard", T0))
    # a worker recorded PROMOTED and died before its apply: Redis still holds seq 1
    store.append(state, "PROMOTED", "w1", T0, tier="senior")

    cancel(state.dispute_id, scheduler=scheduler, store=store, actor="jane", reason="done")

    assert [e["seq"] for e in scheduler.review] == ["2"]
    assert store.events(state.dispute_id) == ["ENQUEUED", "PROMOTED", "CANCELLED"]
    assert str(state.dispute_id) not in scheduler.payloads


def test_cancelling_twice_returns_the_cancelled_state_and_writes_nothing_more(
    world: tuple[FakeScheduler, FakeAuditLog],
) -> None:
    scheduler, store = world
    state = seed(store, scheduler, pending(LADDER, "standard", T0))
    first = cancel(state.dispute_id, scheduler=scheduler, store=store, actor="a", reason="r")
    again = cancel(state.dispute_id, scheduler=scheduler, store=store, actor="a", reason="r")
    assert again == first
    assert store.events(state.dispute_id) == ["ENQUEUED", "CANCELLED"]


@pytest.mark.parametrize(("dispute", "reason", "field"), [
    ("not-a-uuid", "resolved", "dispute"),
    (None, "", "reason"),
    (None, "two\nlines", "reason"),
    (None, "x" * 501, "reason"),
])
def test_bad_input_is_refused_naming_the_field_and_nothing_is_written(
    world: tuple[FakeScheduler, FakeAuditLog], dispute: str | None, reason: str, field: str,
) -> None:
    scheduler, store = world
    state = seed(store, scheduler, pending(LADDER, "standard", T0))
    before = (list(store.ledger), dict(scheduler.payloads), dict(scheduler.scores))
    with pytest.raises(InvalidInput, match=field):
        cancel(dispute or state.dispute_id, scheduler=scheduler, store=store, actor="a",
               reason=reason)
    assert (store.ledger, scheduler.payloads, scheduler.scores) == before


def test_an_unknown_dispute_is_not_found_and_a_terminal_one_is_a_conflict(
    world: tuple[FakeScheduler, FakeAuditLog],
) -> None:
    scheduler, store = world
    with pytest.raises(NotFound):
        cancel(uuid.uuid4(), scheduler=scheduler, store=store, actor="a", reason="r")
    state = seed(store, scheduler, pending(LADDER, "senior", T0))
    store.append(state, "TERMINAL", "w1", T0, status=Status.TERMINAL)
    rows = len(store.ledger)
    with pytest.raises(ConflictError, match="terminal"):
        cancel(state.dispute_id, scheduler=scheduler, store=store, actor="a", reason="r")
    assert len(store.ledger) == rows
