"""Per-deadline outcomes over hand-built chains (pure): statuses, lateness in business days
across a Federal Reserve holiday, the tier holding a deadline, tier load in ladder order,
the CSV's formula guard."""

from __future__ import annotations

import csv
import io
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from escalation.adapters.ladder_files import load_ladder_file
from escalation.domain.business_calendar import builtin_calendars
from escalation.domain.errors import InvalidInput, LadderError
from escalation.ports import ChainEvent, DeadlineChain, PendingEscalation
from escalation.service_layer import deadline_outcomes as dl

LADDER_DIR = Path(__file__).resolve().parents[2] / "ladders"
LADDER = load_ladder_file(LADDER_DIR / "reg_e_error_resolution.v1.toml")
NAME = "determine_or_provisionally_credit"
DEADLINE = datetime(2024, 2, 15, 22, tzinfo=UTC)  # Thu 17:00 EST
NOW = datetime(2024, 3, 5, 12, tzinfo=UTC)


def lookup(name: str, version: int):
    if name != LADDER.name:
        raise LadderError(f"unknown ladder {name}")
    return LADDER


def chain(events: list[tuple[str, datetime, str | None, str | None]],
          deadline: datetime = DEADLINE, ladder: str = LADDER.name) -> DeadlineChain:
    return DeadlineChain(
        uuid.uuid4(), "EXT", ladder, 1, ((NAME, deadline),),
        tuple(ChainEvent(i + 1, e, t, f, to) for i, (e, t, f, to) in enumerate(events)))


def one(c: DeadlineChain, now: datetime = NOW) -> dl.DeadlineOutcome:
    [o] = dl.outcomes_of([c], now, lookup, builtin_calendars())
    return o


ENQ = ("ENQUEUED", datetime(2024, 2, 1, 14, tzinfo=UTC), None, "standard")


def test_met_when_resolved_at_the_deadline():
    o = one(chain([ENQ, ("CANCELLED", DEADLINE, "standard", "standard")]))
    assert (o.status, o.late_s, o.late_business_days) == ("met", 0.0, 0)
    assert o.met_or_missed_at == DEADLINE
    assert o.citation.startswith("12 CFR 1005.11(c)(1)")


def test_missed_across_a_holiday_counts_business_days():
    # resolved Tue 2024-02-20 10:00 EST: Fri 16th counts, Sat/Sun and Mon 19th
    # (Washington's Birthday) do not, Tue 20th counts
    o = one(chain([ENQ, ("CANCELLED", datetime(2024, 2, 20, 15, tzinfo=UTC), "standard",
                         "standard")]))
    assert o.status == "missed"
    assert o.late_s == 113 * 3600
    assert o.late_business_days == 2
    assert o.met_or_missed_at == DEADLINE


def test_missed_and_still_open_is_late_until_now():
    o = one(chain([ENQ]), now=DEADLINE + timedelta(hours=30))
    assert (o.status, o.late_s, o.late_business_days) == ("missed", 30 * 3600.0, 1)
    assert o.resolved_at is None


def test_tier_holding_the_deadline_is_the_tier_at_that_instant():
    promoted = ("PROMOTED", DEADLINE - timedelta(seconds=1), "standard", "senior")
    later = ("PROMOTED", DEADLINE + timedelta(days=2), "senior", "compliance")
    assert one(chain([ENQ, promoted, later])).tier == "senior"
    # a deadline passed before the dispute was even enqueued: its first tier
    early = chain([ENQ], deadline=ENQ[1] - timedelta(days=1))
    assert one(early).tier == "standard"


def test_at_risk_within_48_hours_then_pending():
    assert one(chain([ENQ]), now=DEADLINE - timedelta(hours=47)).status == "at_risk"
    assert one(chain([ENQ]), now=DEADLINE - timedelta(hours=49)).status == "pending"


def test_unknown_ladder_has_no_citation_and_whole_days():
    o = one(chain([ENQ], ladder="gone"), now=DEADLINE + timedelta(days=3, hours=1))
    assert (o.citation, o.late_business_days) == ("", 3)


def test_select_filters_and_sorts():
    a = one(chain([ENQ, ("CANCELLED", DEADLINE + timedelta(hours=5), "standard", "x")]))
    b = one(chain([ENQ, ("CANCELLED", DEADLINE + timedelta(hours=50), "standard", "x")]))
    c = one(chain([ENQ, ("CANCELLED", DEADLINE, "standard", "x")]))
    got = dl.select([a, b, c], status="missed", sort="late", descending=True)
    assert got == [b, a]
    with pytest.raises(InvalidInput):
        dl.select([a], status="late")
    with pytest.raises(InvalidInput):
        dl.select([a], sort="nope")


@pytest.mark.parametrize("cell", ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"])
def test_formula_cells_get_a_quote(cell):
    assert dl.safe_cell(cell) == "'" + cell


def test_csv_guards_cells_and_shows_the_zone_offset():
    o = one(chain([ENQ]))
    o = dl.DeadlineOutcome(**{**{f: getattr(o, f) for f in o.__dataclass_fields__},
                              "external_id": "=HYPERLINK(\"x\")"})
    text = dl.to_csv([o], ZoneInfo("America/New_York"))
    row = next(csv.DictReader(io.StringIO(text)))
    assert row["external_id"] == "'=HYPERLINK(\"x\")"
    assert row["deadline_at"] == "2024-02-15T17:00:00-05:00"
    assert row["late_business_days"] == str(o.late_business_days)


def test_tier_load_in_ladder_order_with_windows():
    now = NOW

    def p(tier: str, due: datetime | None) -> PendingEscalation:
        return PendingEscalation(uuid.uuid4(), None, LADDER.name, 1, tier, due, now)

    rows = dl.tier_load([
        p("compliance", now - timedelta(seconds=1)), p("standard", now + timedelta(minutes=30)),
        p("standard", now + timedelta(hours=5)), p("senior", now + timedelta(days=3)),
        p("standard", None)], now, lookup)
    assert [r.tier for r in rows] == ["standard", "senior", "compliance"]
    std = rows[0]
    assert (std.pending, std.due_hour, std.due_day, std.overdue) == (3, 1, 2, 0)
    assert rows[2].overdue == 1
    assert dl.pending_window(p("x", now), now, "overdue")
    with pytest.raises(InvalidInput):
        dl.pending_window(p("x", now), now, "week")


def test_lateness_is_counted_in_the_disputes_own_institution_zone():
    # reg_e v2 counts its deadlines in the `institution` calendar: the dispute's own zone.
    # Missed Thu 2024-02-15 22:00 UTC; at Fri 06:00 UTC it is already Friday in New York
    # (1 business day late) but still Thursday in Los Angeles (0). The console counted every
    # dispute in the deployment's zone; the SLA report and `audit search --deadlines` in the
    # dispute's own.
    v2 = load_ladder_file(LADDER_DIR / "reg_e_error_resolution.v2.toml")
    [rule] = [d for d in v2.deadlines if d.name == NAME]
    assert rule.window.calendar == "institution"

    def outcome(tz: str | None) -> dl.DeadlineOutcome:
        c = DeadlineChain(uuid.uuid4(), "EXT", v2.name, 2, ((NAME, DEADLINE),),
                          (ChainEvent(1, *ENQ),), tz, None if tz is None else "us_federal_reserve")
        [o] = dl.outcomes_of([c], datetime(2024, 2, 16, 6, tzinfo=UTC),
                             lambda name, version: v2, builtin_calendars())
        return o

    assert outcome(None).late_business_days == 1  # the deployment's default: New York
    assert outcome("America/New_York").late_business_days == 1
    assert outcome("America/Los_Angeles").late_business_days == 0
