"""Property tests: pausing never moves a due time earlier; no due time or deadline is later
than its rule allows (shipped ladders, every attribute variant, NY and LA institutions)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from escalation.adapters.ladder_files import LadderCatalog
from escalation.domain.calendars import (
    SlaWindow,
    WindowUnit,
    builtin_calendars,
    end_of_local_day,
    local_date,
    window_end,
    with_institution,
)
from escalation.domain.deadline_rules import billing_cycle_end, zone_of
from escalation.domain.sla_timing import cap_due, remaining_ms, resume_due
from escalation.service_layer.enqueue import EnqueueRequest, build_with_provenance

ROOT = Path(__file__).resolve().parents[2]
CATALOG = LadderCatalog.from_dir(ROOT / "ladders")
CALS = builtin_calendars()
ZONES = ["America/New_York", "America/Los_Angeles"]
REGS = {z: with_institution(CALS, "us_federal_reserve", z) for z in ZONES}

instants = st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2030, 12, 31),
                        timezones=st.just(UTC))
units = st.sampled_from([WindowUnit.BUSINESS_DAYS, WindowUnit.BUSINESS_HOURS,
                         WindowUnit.CALENDAR_DAYS, WindowUnit.CALENDAR_HOURS])


@settings(deadline=None)
@given(entered=instants, amount=st.integers(1, 15), unit=units, zone_name=st.sampled_from(ZONES),
       pause_frac=st.floats(0, 0.999), pause_len=st.integers(0, 40 * 24 * 3600),
       cap_days=st.integers(0, 60))
def test_pausing_never_moves_the_due_time_earlier(
    entered: datetime, amount: int, unit: WindowUnit, zone_name: str, pause_frac: float,
    pause_len: int, cap_days: int,
) -> None:
    cal = REGS[zone_name]["institution"]
    window = SlaWindow(amount, unit, "institution")
    due = window_end(entered, window, REGS[zone_name])
    paused = entered + (due - entered) * pause_frac
    resumed = paused + timedelta(seconds=pause_len)
    left = remaining_ms(window, cal, paused, due)
    after = resume_due(window, cal, resumed, left)
    assert after >= due
    # with a regulatory cap that the original due time respected, the capped resume due is
    # still never earlier than the original due time
    cap = due + timedelta(days=cap_days)
    assert cap_due(after, cap, resumed) >= due


LADDERS = [lad for lad in CATALOG.all() if lad.deadlines]


@st.composite
def attributes(draw: st.DrawFn) -> dict[str, object]:
    return {"cycle_closing_day": draw(st.integers(1, 31)),
            "new_account": draw(st.booleans()), "point_of_sale": draw(st.booleans()),
            "foreign_initiated": draw(st.booleans())}


@settings(deadline=None)
@given(ladder_i=st.integers(0, len(LADDERS) - 1), anchor=instants,
       zone_name=st.sampled_from(ZONES), attrs=attributes())
def test_no_due_time_or_deadline_later_than_its_rule_allows(
    ladder_i: int, anchor: datetime, zone_name: str, attrs: dict[str, object],
) -> None:
    ladder = LADDERS[ladder_i]
    req = EnqueueRequest(dispute_id=uuid.uuid4(), materiality="10.00", source_hash="ab" * 32,
                         ladder=ladder.name, opened_at=anchor, timezone=zone_name,
                         attributes={a: attrs[a] for a in ladder.needs})
    esc, details = build_with_provenance(req, ladder, CALS, anchor)
    deadlines = dict(esc.deadlines)
    for rule in ladder.deadlines:
        if rule.started_by:  # an action's clock: not placed at enqueue
            assert rule.name not in deadlines
            continue
        tz = zone_of(rule.window, esc.calendars(CALS))  # the rule calendar's zone
        at = deadlines[rule.name]
        longest = max([rule.window.amount, *(v.window.amount for v in rule.variants)])
        if rule.window.unit is WindowUnit.CALENDAR_DAYS:
            # never after the end of the local day `longest` days after the anchor's day
            assert at <= end_of_local_day(local_date(anchor, tz) + timedelta(days=longest), tz)
        if rule.billing_cycles:
            assert at <= end_of_local_day(local_date(anchor, tz) + timedelta(days=90), tz)
            end = billing_cycle_end(local_date(anchor, tz), int(str(attrs["cycle_closing_day"])),
                                    rule.billing_cycles)
            assert at <= end_of_local_day(end, tz)
        assert at > anchor
    # the first tier's due time is not later than any deadline that caps it
    for rule in ladder.deadlines_for(esc.tier):
        if not rule.started_by:
            assert esc.due_at <= deadlines[rule.name]
    if ladder.deadlines_for(esc.tier):
        assert isinstance(details.get("deadline"), dict)
