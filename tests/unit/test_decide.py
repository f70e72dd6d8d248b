"""decide(): promotion, terminal escalation, not due, pinned version, next due, deadline cap."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from escalation.domain.calendars import SlaWindow, WindowUnit, builtin_calendars
from escalation.domain.decide import DecisionKind, decide
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation, NewEscalation
from escalation.domain.ladder import Ladder, Tier

CALS = builtin_calendars()
NY = ZoneInfo("America/New_York")
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # Monday


def _ladder(version: int = 1, senior: SlaWindow | None = None) -> Ladder:
    return Ladder(
        name="dispute_review",
        version=version,
        tiers=(
            Tier("standard", "Standard", 10, SlaWindow(24, WindowUnit.CALENDAR_HOURS)),
            Tier("senior", "Senior", 20, senior or SlaWindow(48, WindowUnit.CALENDAR_HOURS)),
            Tier("compliance", "Compliance", 30, SlaWindow(72, WindowUnit.CALENDAR_HOURS)),
        ),
        terminal_tier="compliance",
        previous_version=None if version == 1 else version - 1,
    )


def _esc(tier: str, due_at: datetime, ladder: Ladder, deadline: datetime | None = None):
    return Escalation.new(NewEscalation(
        dispute_id=uuid.uuid4(),
        tier=tier,
        due_at=due_at,
        materiality="100.00",
        source_hash="ab" * 32,
        entered_tier_at=due_at - timedelta(hours=24),
        trace_id="t",
        regulatory_deadline=deadline),
        ladder)


def test_due_standard_is_promoted_to_senior_with_due_from_now() -> None:
    lad = _ladder()
    now = T0 + timedelta(minutes=7)  # claimed a little late
    d = decide(_esc("standard", T0, lad), lad, now, CALS)
    assert (d.kind, d.match_decision, d.from_tier, d.to_tier) == (
        DecisionKind.PROMOTED,
        "PROMOTED_TO_SENIOR",
        "standard",
        "senior",
    )
    assert d.next_due_at == now + timedelta(hours=48)
    assert d.decided_at == now


def test_due_senior_is_promoted_to_compliance() -> None:
    lad = _ladder()
    d = decide(_esc("senior", T0, lad), lad, T0, CALS)
    assert (d.match_decision, d.to_tier) == ("PROMOTED_TO_COMPLIANCE", "compliance")
    assert d.next_due_at == T0 + timedelta(hours=72)


def test_due_terminal_tier_is_terminal_escalation() -> None:
    lad = _ladder()
    d = decide(_esc("compliance", T0, lad), lad, T0, CALS)
    assert (d.kind, d.match_decision, d.to_tier, d.next_due_at) == (
        DecisionKind.TERMINAL,
        "TERMINAL_ESCALATION",
        None,
        None,
    )


def test_claimed_before_due_is_not_due() -> None:
    lad = _ladder()
    d = decide(_esc("standard", T0, lad), lad, T0 - timedelta(milliseconds=1), CALS)
    assert (d.kind, d.match_decision, d.to_tier) == (DecisionKind.NOT_DUE, "NOT_DUE", None)


def test_exactly_at_due_time_is_promoted() -> None:
    lad = _ladder()
    assert decide(_esc("standard", T0, lad), lad, T0, CALS).kind is DecisionKind.PROMOTED


def test_refuses_a_different_ladder_version() -> None:
    v1, v2 = _ladder(1), _ladder(2)
    with pytest.raises(InvalidInput, match="pinned to dispute_review@1"):
        decide(_esc("standard", T0, v1), v2, T0, CALS)


def test_refuses_naive_now() -> None:
    lad = _ladder()
    with pytest.raises(InvalidInput):
        decide(_esc("standard", T0, lad), lad, datetime(2026, 3, 2, 12), CALS)


def test_next_due_is_counted_in_the_next_tiers_calendar() -> None:
    lad = _ladder(senior=SlaWindow(2, WindowUnit.BUSINESS_DAYS, "us_federal_reserve"))
    wednesday = datetime(2026, 11, 25, 15, 0, tzinfo=NY)  # Wed before Thanksgiving
    d = decide(_esc("standard", wednesday, lad), lad, wednesday, CALS)
    # Thu 26 is a Fed holiday: Fri 27 is business day 1, Mon 30 business day 2, at close.
    assert d.next_due_at == datetime(2026, 11, 30, 17, 0, tzinfo=NY)


def test_next_due_is_capped_at_the_regulatory_deadline() -> None:
    lad = _ladder()
    deadline = T0 + timedelta(hours=10)
    d = decide(_esc("standard", T0, lad, deadline), lad, T0, CALS)
    assert d.next_due_at == deadline


def test_past_regulatory_deadline_caps_at_now_not_in_the_past() -> None:
    lad = _ladder()
    deadline = T0 + timedelta(hours=1)
    now = T0 + timedelta(hours=5)
    d = decide(_esc("standard", T0, lad, deadline), lad, now, CALS)
    assert d.next_due_at == now


def test_deadline_later_than_window_does_not_change_due() -> None:
    lad = _ladder()
    d = decide(_esc("standard", T0, lad, T0 + timedelta(days=30)), lad, T0, CALS)
    assert d.next_due_at == T0 + timedelta(hours=48)


def test_terminal_tier_due_is_capped_at_its_deadline_minus_buffer() -> None:
    # several regulatory deadlines (docs/sla.md): the 60-day one (buffer 5 calendar days) caps only
    # the terminal tier, the 15-day one (buffer 2) the tiers before it.
    from escalation.domain.ladder import RegulatoryDeadline

    fed = "us_federal_reserve"
    tiers = (
        Tier("standard", "Standard", 10, SlaWindow(5, WindowUnit.CALENDAR_DAYS, fed)),
        Tier("senior", "Senior", 20, SlaWindow(5, WindowUnit.CALENDAR_DAYS, fed)),
        Tier("compliance", "Compliance", 30, SlaWindow(90, WindowUnit.CALENDAR_DAYS, fed)),
    )
    d15 = RegulatoryDeadline("response", "sent", SlaWindow(15, WindowUnit.CALENDAR_DAYS, fed),
                             2, ("standard", "senior"))
    d60 = RegulatoryDeadline("final", "sent", SlaWindow(60, WindowUnit.CALENDAR_DAYS, fed),
                             5, ("compliance",))
    lad = Ladder("cfpb", 1, tiers, "compliance", deadlines=(d15, d60))
    anchor = T0
    at15, at60 = T0 + timedelta(days=15), T0 + timedelta(days=60)  # 2026-05-01 12:00 UTC
    esc = Escalation.new(NewEscalation(
        dispute_id=uuid.uuid4(),
        tier="senior",
        due_at=T0 + timedelta(days=10),
        materiality="1.00",
        source_hash="ab",
        entered_tier_at=T0 + timedelta(days=5),
        trace_id="t",
        regulatory_deadline=at15,
        deadlines=(("response", at15), ("final", at60))),
        lad)
    now = anchor + timedelta(days=10)
    d = decide(esc, lad, now, CALS)
    # 90-day window from now would end on day 100: capped at day 60 - 5 days, not at day 13.
    assert d.to_tier == "compliance"
    # 5 New York wall-clock days before the deadline (no DST change between them)
    assert d.next_due_at == datetime(2026, 4, 26, 12, 0, tzinfo=UTC)
    assert d.regulatory_deadline == at60
    assert d.calendar_version is not None and d.calendar_version.startswith("fed-")
