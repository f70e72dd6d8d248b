"""Pure ladder migration planning (escalation.domain.ladder_plan): due rules, maps, hash."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from escalation.domain.calendars import SlaWindow, WindowUnit, builtin_calendars
from escalation.domain.escalation import Escalation, NewEscalation
from escalation.domain.ladder import DUE_FROM_TIER_ENTRY, Ladder, MigrationPolicy, Tier
from escalation.domain.ladder_plan import (
    Blocked,
    DueRule,
    PlanItem,
    build_plan,
    change_hash,
    plan_escalation,
)

CAL = builtin_calendars()
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _tier(tid: str, rank: int, hours: int) -> Tier:
    return Tier(tid, tid.title(), rank, SlaWindow(hours, WindowUnit.CALENDAR_HOURS))


V1 = Ladder("d", 1, (_tier("standard", 10, 24), _tier("senior", 20, 48),
                     _tier("compliance", 30, 72)), "compliance")


def _v2(*tiers: Tier, tier_map: dict[str, str] | None = None, recompute: bool = False) -> Ladder:
    policy = MigrationPolicy(DUE_FROM_TIER_ENTRY if recompute else "keep",
                             SlaWindow(30, WindowUnit.CALENDAR_MINUTES))
    return Ladder("d", 2, tiers, tiers[-1].id, previous_version=1, tier_map=tier_map or {},
                  migration=policy, checksum="c" * 64)


def _esc(tier: str, entered: datetime, due: datetime) -> Escalation:
    return Escalation.new(NewEscalation(
        dispute_id=uuid.uuid4(),
        tier=tier,
        due_at=due,
        materiality="1.00",
        source_hash="ab",
        entered_tier_at=entered,
        trace_id="t"),
        V1).with_changes(seq=3)


def test_shortened_window_due_is_floored_at_now_plus_grace_and_capped_by_current_due() -> None:
    v2 = _v2(_tier("standard", 10, 2), _tier("senior", 20, 48), _tier("compliance", 30, 72),
             recompute=True)
    esc = _esc("standard", T0 - timedelta(hours=10), T0 + timedelta(hours=14))
    item = plan_escalation(esc, {1: V1, 2: v2}, v2, CAL)
    assert isinstance(item, PlanItem) and item.due.rule is DueRule.FLOOR
    assert item.due.resolve(T0, CAL) == T0 + timedelta(minutes=30)
    assert item.due.suppressed(T0, CAL)
    # close to the old due time, the floor never makes it later than it already was
    assert item.due.resolve(T0 + timedelta(hours=14), CAL) == T0 + timedelta(hours=14)


def test_lengthened_window_recomputes_from_tier_entry_and_keep_policy_keeps_due() -> None:
    tiers = (_tier("standard", 10, 48), _tier("senior", 20, 48), _tier("compliance", 30, 72))
    esc = _esc("standard", T0, T0 + timedelta(hours=24))
    item = plan_escalation(esc, {1: V1, 2: _v2(*tiers, recompute=True)},
                           _v2(*tiers, recompute=True), CAL)
    assert isinstance(item, PlanItem) and item.due.resolve(T0, CAL) == T0 + timedelta(hours=48)
    kept = plan_escalation(esc, {1: V1, 2: _v2(*tiers)}, _v2(*tiers), CAL)
    assert isinstance(kept, PlanItem) and kept.due.resolve(T0, CAL) == T0 + timedelta(hours=24)


def test_a_shortened_window_never_makes_a_due_time_later() -> None:
    # Explicit due times earlier than tier entry + the old window (entered = enqueue time):
    # the due time moves sooner by the amount the window shrank (24 h -> 2 h: 22 h), floored
    # at now + grace; an escalation already due keeps its due time (it fires) and is not
    # counted as a suppressed breach.
    v2 = _v2(_tier("standard", 10, 2), _tier("senior", 20, 48), _tier("compliance", 30, 72),
             recompute=True)
    versions = {1: V1, 2: v2}
    soon = plan_escalation(_esc("standard", T0, T0 + timedelta(hours=1)), versions, v2, CAL)
    assert isinstance(soon, PlanItem) and soon.due.rule is DueRule.FLOOR
    assert soon.due.recomputed == T0 - timedelta(hours=21)
    assert soon.due.resolve(T0, CAL) == T0 + timedelta(minutes=30)
    assert soon.due.suppressed(T0, CAL)
    overdue_at = T0 - timedelta(hours=1)
    overdue = plan_escalation(_esc("standard", overdue_at, overdue_at), versions, v2, CAL)
    assert isinstance(overdue, PlanItem)
    assert overdue.due.resolve(T0, CAL) == overdue_at
    assert not overdue.due.suppressed(T0, CAL)
    for hours_ahead in (1, 5, 30):  # every due time, every apply instant: never later
        for entered_ago in (0, 3, 20):
            esc = _esc("standard", T0 - timedelta(hours=entered_ago),
                       T0 + timedelta(hours=hours_ahead))
            item = plan_escalation(esc, versions, v2, CAL)
            assert isinstance(item, PlanItem)
            for now in (T0, T0 + timedelta(hours=hours_ahead + 1)):
                due = item.due.resolve(now, CAL)
                assert due is not None and due <= esc.due_at


def test_a_lengthened_window_keeps_paused_time_and_never_makes_a_due_time_earlier() -> None:
    tiers = (_tier("standard", 10, 48), _tier("senior", 20, 48), _tier("compliance", 30, 72))
    v2 = _v2(*tiers, recompute=True)
    # paused for 5 h: due = entry + 24 h + 5 h; lengthened by 24 h it is entry + 53 h
    paused = _esc("standard", T0, T0 + timedelta(hours=29))
    item = plan_escalation(paused, {1: V1, 2: v2}, v2, CAL)
    assert isinstance(item, PlanItem) and item.due.rule is DueRule.RECOMPUTED
    assert item.due.resolve(T0, CAL) == T0 + timedelta(hours=53)
    # an explicit due time an hour after enqueue: 25 h after it
    explicit = _esc("standard", T0, T0 + timedelta(hours=1))
    moved = plan_escalation(explicit, {1: V1, 2: v2}, v2, CAL)
    assert isinstance(moved, PlanItem) and moved.due.resolve(T0, CAL) == T0 + timedelta(hours=25)


def test_recompute_leaves_a_tier_whose_window_did_not_change_alone() -> None:
    # Only senior's window changes (48 h -> 36 h). A standard escalation paused for a day
    # (or given an explicit due time at enqueue) keeps its due time: recomputing it from
    # the tier entry would lose the paused day. The senior one is recomputed (floored).
    v2 = _v2(_tier("standard", 10, 24), _tier("senior", 20, 36), _tier("compliance", 30, 72),
             recompute=True)
    versions = {1: V1, 2: v2}
    paused_a_day = _esc("standard", T0 - timedelta(hours=20), T0 + timedelta(hours=28))
    item = plan_escalation(paused_a_day, versions, v2, CAL)
    assert isinstance(item, PlanItem) and item.due.rule is DueRule.KEEP
    assert item.due.resolve(T0, CAL) == T0 + timedelta(hours=28)
    senior = _esc("senior", T0 - timedelta(hours=10), T0 + timedelta(hours=38))
    moved = plan_escalation(senior, versions, v2, CAL)
    assert isinstance(moved, PlanItem) and moved.due.rule is DueRule.FLOOR
    assert moved.due.resolve(T0, CAL) == T0 + timedelta(hours=26)  # entry + 36 h


def test_a_recomputed_due_applies_the_materiality_band_as_decide_does() -> None:
    # v2 lengthens standard to 48 h; a band halves the windows of disputes >= 1,000.00:
    # a large dispute's recomputed due is entry + 24 h, as decide would count its window.
    from decimal import Decimal

    from escalation.domain.ladder import MaterialityBand

    tiers = (_tier("standard", 10, 48), _tier("senior", 20, 48), _tier("compliance", 30, 72))
    band = MaterialityBand("large", Decimal("1000.00"), None, Decimal("0.5"))
    v1 = replace(V1, bands=(band,))
    v2 = replace(_v2(*tiers, recompute=True), bands=(band,))
    large = Escalation.new(NewEscalation(
        dispute_id=uuid.uuid4(),
        tier="standard",
        due_at=T0 + timedelta(hours=6),
        materiality="5000.00",
        source_hash="ab",
        entered_tier_at=T0 - timedelta(hours=6),
        trace_id="t"),
        v1)
    item = plan_escalation(large.with_changes(seq=3), {1: v1, 2: v2}, v2, CAL)
    assert isinstance(item, PlanItem) and item.due.rule is DueRule.RECOMPUTED
    assert item.due.resolve(T0, CAL) == T0 + timedelta(hours=18)  # entry + 48 h x 0.5


def test_map_that_would_demote_is_blocked_and_unmapped_removal_is_blocked() -> None:
    swapped = _v2(_tier("standard", 10, 24), _tier("compliance", 20, 72), _tier("senior", 30, 48))
    esc = _esc("compliance", T0, T0 + timedelta(hours=1))
    blocked = plan_escalation(esc, {1: V1, 2: swapped}, swapped, CAL)
    assert isinstance(blocked, Blocked) and "demotion" in blocked.reason
    removed = _v2(_tier("standard", 10, 24), _tier("compliance", 30, 72))
    unmapped = plan_escalation(_esc("senior", T0, T0), {1: V1, 2: removed}, removed, CAL)
    assert isinstance(unmapped, Blocked) and "tier_map" in unmapped.reason


def test_plan_hash_names_the_change_not_the_members_or_the_clock() -> None:
    v2 = _v2(_tier("standard", 10, 2), _tier("senior", 20, 48), _tier("compliance", 30, 72),
             recompute=True)
    esc = _esc("standard", T0 - timedelta(hours=10), T0 + timedelta(hours=14))
    a = build_plan([esc], {1: V1, 2: v2}, v2, CAL)
    b = build_plan([esc.with_changes(seq=4)], {1: V1, 2: v2}, v2, CAL)
    c = build_plan([], {1: V1, 2: v2}, v2, CAL)
    assert a.plan_hash == b.plan_hash == c.plan_hash  # members move; the change does not
    assert a.plan_hash == change_hash(v2.name, 2, [(1, V1.checksum), (2, v2.checksum)])
    edited = replace(v2, checksum="f" * 64)
    assert build_plan([esc], {1: V1, 2: edited}, edited, CAL).plan_hash != a.plan_hash
    assert change_hash(v2.name, 2, [(1, "0" * 64), (2, v2.checksum)]) != a.plan_hash
    assert change_hash(v2.name, 3, [(1, V1.checksum), (2, v2.checksum)]) != a.plan_hash


def test_migrated_pending_escalation_names_the_deadline_bounding_its_due_time() -> None:
    from pathlib import Path

    from escalation.adapters.ladder_files import LadderCatalog

    cat = LadderCatalog.from_dir(Path(__file__).resolve().parents[2] / "ladders")
    v1, v2 = cat.get("reg_z_billing_error", 1), cat.get("reg_z_billing_error", 2)
    at = datetime(2026, 4, 6, 4, tzinfo=UTC)
    esc = Escalation.new(NewEscalation(
        dispute_id=uuid.uuid4(),
        tier="senior",
        due_at=at - timedelta(days=9),
        materiality="1.00",
        source_hash="ab" * 32,
        entered_tier_at=at - timedelta(days=29),
        trace_id="t",
        regulatory_deadline=at,
        deadlines=(("resolution", at),)),
        v1)
    item = plan_escalation(esc, {1: v1, 2: v2}, v2, CAL)
    assert isinstance(item, PlanItem)
    assert item.deadline == {"name": "resolution", "citation": "12 CFR 1026.13(c)(2)",
                             "at": at.isoformat(), "capped": False}
