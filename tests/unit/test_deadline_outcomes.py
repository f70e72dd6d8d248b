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
from escalation.domain.calendars import builtin_calendars
from escalation.domain.csv_cells import csv_cell
from escalation.domain.errors import InvalidInput, LadderError
from escalation.ports import ChainEvent, DeadlineChain, PendingEscalation, TierCount
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


def test_met_when_resolved_before_the_deadline():
    just = DEADLINE - timedelta(seconds=1)
    o = one(chain([ENQ, ("CANCELLED", just, "standard", "standard")]))
    assert (o.status, o.late_s, o.late_business_days) == ("met", 0.0, 0)
    assert (o.basis, o.action, o.action_at) == ("record", "resolution", just)
    assert o.met_or_missed_at == just
    assert o.citation.startswith("12 CFR 1005.11(c)(1)")
    # domain.obligations: met by an action strictly before the instant; at it is late
    assert one(chain([ENQ, ("CANCELLED", DEADLINE, "standard", "standard")])).status == \
        "missed"


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


def test_unknown_ladder_has_no_citation_and_counts_the_institution_calendar():
    # Thu 17:00 EST + 3 d 1 h = Sun: only Friday is a business day after the deadline
    o = one(chain([ENQ], ladder="gone"), now=DEADLINE + timedelta(days=3, hours=1))
    assert (o.citation, o.late_business_days, o.status) == ("", 1, "missed")


def test_select_filters_and_sorts():
    a = one(chain([ENQ, ("CANCELLED", DEADLINE + timedelta(hours=5), "standard", "x")]))
    b = one(chain([ENQ, ("CANCELLED", DEADLINE + timedelta(hours=50), "standard", "x")]))
    c = one(chain([ENQ, ("CANCELLED", DEADLINE - timedelta(hours=1), "standard", "x")]))
    got = dl.select([a, b, c], dl.Selection(status="missed", sort="late", descending=True))
    assert got == [b, a]
    with pytest.raises(InvalidInput):
        dl.select([a], dl.Selection(status="late"))
    with pytest.raises(InvalidInput):
        dl.select([a], dl.Selection(sort="nope"))


@pytest.mark.parametrize("cell", ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"])
def test_formula_cells_get_a_quote(cell):
    assert csv_cell(cell) == "'" + cell


def test_csv_guards_cells_and_shows_the_zone_offset():
    o = one(chain([ENQ]))
    o = dl.DeadlineOutcome(**{**{f: getattr(o, f) for f in o.__dataclass_fields__},
                              "external_id": "=HYPERLINK(\"x\")"})
    text = dl.to_csv([o], ZoneInfo("America/New_York"))
    row = next(csv.DictReader(io.StringIO(text)))
    assert row["external_id"] == "'=HYPERLINK(\"x\")"
    assert row["deadline_at"] == "2024-02-15T17:00:00-05:00"
    assert row["late_business_days"] == str(o.late_business_days)


def test_csv_chunks_send_the_first_row_at_once_then_whole_chunks():
    # a download's first bytes wait for one row, not for a chunk of rows: the first chunk
    # is the header and row 1, then rows 2-4, 5-7, then the rest; together the whole CSV
    outcomes = [one(chain([ENQ]))] * 8
    seen: list[int] = []

    def counted():
        for n, o in enumerate(outcomes, 1):
            seen.append(n)
            yield o

    chunks = dl.csv_chunks(counted(), ZoneInfo("UTC"), rows_per_chunk=3)
    first = next(chunks)
    assert seen == [1]  # nothing past the first row was read
    assert first.count("\n") == 2 and first.startswith("dispute_id,")
    rest = list(chunks)
    assert [c.count("\n") for c in rest] == [3, 3, 1]
    assert first + "".join(rest) == dl.to_csv(outcomes, ZoneInfo("UTC"))


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


def test_tier_load_of_the_databases_counts_adds_versions_in_ladder_order():
    rows = dl.tier_load_of([
        TierCount(LADDER.name, 1, "compliance", 2, 0, 0, 2),
        TierCount(LADDER.name, 1, "standard", 3, 1, 2, 0),
        TierCount(LADDER.name, 2, "standard", 4, 0, 1, 1),  # another version: added up
        TierCount(LADDER.name, 1, "senior", 1, 0, 0, 0),
        TierCount("gone", 1, "x", 5, 0, 0, 5)], lookup)  # unknown ladder: rank last
    assert [(r.ladder, r.tier) for r in rows] == [
        ("gone", "x"), (LADDER.name, "standard"), (LADDER.name, "senior"),
        (LADDER.name, "compliance")]
    std = rows[1]
    assert (std.pending, std.due_hour, std.due_day, std.overdue) == (7, 1, 3, 1)
    assert rows[0].rank == 1 << 30


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


# --------------------------------------------------------------------------- obligations
# Reg E v3 (ADR 0010): a provisional credit meets the 10-business-day deadline and opens the
# 45-day investigation window; without a timely one, the determination is due at day 10.
V3 = load_ladder_file(LADDER_DIR / "reg_e_error_resolution.v3.toml")
D10, D45 = "determine_or_provisionally_credit", "investigation"
ANCHOR = datetime(2024, 3, 4, 15, tzinfo=UTC)  # Mon 10:00 EST, notice of error received
ATTRS = {"new_account": False, "point_of_sale": False, "foreign_initiated": False}
CALS = builtin_calendars()
AT10 = next(d for d in V3.deadlines if d.name == D10).resolve(ANCHOR, CALS, ATTRS).at
AT45 = next(d for d in V3.deadlines if d.name == D45).resolve(ANCHOR, CALS, ATTRS).at
DAY3 = datetime(2024, 3, 6, 16, tzinfo=UTC)  # the third business day after the notice


def v3_chain(*rows: tuple[str, datetime, str | None, str | None, str, dict | None]
             ) -> DeadlineChain:
    """ENQUEUED (with the details enqueue writes) then ``rows`` (event, decided_at, from,
    to, actor, details)."""
    enq = ChainEvent(1, "ENQUEUED", ANCHOR + timedelta(minutes=5), None, "standard", "import",
                     {"anchor_at": ANCHOR.isoformat(), "attributes": ATTRS,
                      "institution": {"timezone": "America/New_York",
                                      "calendar": "us_federal_reserve"},
                      "deadline_rules": {D10: {"at": AT10.isoformat(), "citation": "c10"},
                                         D45: {"at": AT45.isoformat(), "citation": "c45"}}})
    events = [enq, *(ChainEvent(i + 2, *r) for i, r in enumerate(rows))]
    return DeadlineChain(uuid.uuid4(), "V3", V3.name, 3, ((D10, AT10), (D45, AT45)),
                         tuple(events), "America/New_York", "us_federal_reserve")


def action(at: datetime | None, name: str, actor: str = "ops.alice",
           asserted: bool | None = None, tier: str = "standard", **extra: object
           ) -> tuple[str, datetime, str, str, str, dict]:
    details: dict = {"action": name, "occurred_at": None if at is None else at.isoformat(),
                     **extra}
    if asserted is not None:
        details["asserted"] = {"timely": asserted, "source": "Timely response?"}
    event = "RESOLVED" if name == "resolution" else "ACTION_RECORDED"
    # an assertion without an instant is recorded by an import long after the deadlines (one
    # recorded before a deadline would meet it on record: the action preceded its row)
    return (event, at or ANCHOR + timedelta(days=200), tier, tier, actor, details)


def by_name(c: DeadlineChain, now: datetime) -> dict[str, dl.DeadlineOutcome]:
    return {o.name: o for o in dl.outcomes_of([c], now, lambda n, v: V3, CALS)}


def test_provisional_credit_on_day_3_meets_the_10_day_deadline_and_opens_45_days():
    now = AT10 + timedelta(days=1)
    before = by_name(v3_chain(), now)
    assert before[D10].status == "missed" and before[D10].open_miss
    # without a timely provisional credit the investigation is due with the 10-day deadline
    assert before[D45].deadline == AT10 and "no timely provisional_credit" in before[D45].rule
    got = by_name(v3_chain(action(DAY3, "provisional_credit", amount="125.00",
                                  currency="USD")), now)
    d10 = got[D10]
    assert (d10.status, d10.basis, d10.action, d10.action_at, d10.actor) == (
        "met", "record", "provisional_credit", DAY3, "ops.alice")
    assert d10.explain(lambda t: t.isoformat()) == (
        f"met by provisional credit on {DAY3.isoformat()} by ops.alice")
    assert got[D45].deadline == AT45 > AT10 + timedelta(days=20)
    assert got[D45].status == "pending"
    # the credit started the 2-business-day notice clock, missed while no notice is recorded
    notice = got["provisional_credit_notice"]
    assert notice.status == "missed" and notice.open_miss
    assert notice.late_business_days is not None and notice.late_business_days > 0


def test_resolution_after_the_terminal_tier_meets_the_open_deadlines():
    promoted = ("PROMOTED", AT10 - timedelta(days=3), "standard", "senior", "worker", None)
    to_comp = ("PROMOTED", AT10 - timedelta(days=1), "senior", "compliance", "worker", None)
    term = ("TERMINAL", AT45 - timedelta(days=6), "compliance", None, "worker", None)
    credit = action(DAY3, "provisional_credit", amount="9.99", currency="USD")
    resolved_at = AT45 - timedelta(days=2)
    res = action(resolved_at, "resolution", actor="ops.bob", tier="compliance",
                 outcome="error_corrected")
    got = by_name(v3_chain(credit, promoted, to_comp, term, res), AT45 + timedelta(days=10))
    assert (got[D45].status, got[D45].action, got[D45].actor) == ("met", "resolution",
                                                                  "ops.bob")
    assert got[D45].tier == "compliance" and got[D45].resolved_at == resolved_at
    # without the credit: the resolution came after day 10, so both deadlines are missed,
    # late by the business days up to the resolution (not up to now)
    late = by_name(v3_chain(promoted, to_comp, term, res), AT45 + timedelta(days=10))
    assert late[D10].status == "missed" and late[D10].action == "resolution"
    assert not late[D10].open_miss
    assert late[D10].late_s == (resolved_at - AT10).total_seconds()
    assert late[D45].deadline == AT10 and late[D45].status == "missed"
    assert 20 <= (late[D10].late_business_days or 0) < 30


def test_per_source_met_and_missed_and_undetermined():
    now = AT45 + timedelta(days=30)
    met = by_name(v3_chain(action(None, "determination", actor="importer", asserted=True)),
                  now)
    assert (met[D10].status, met[D10].basis, met[D10].action_at) == ("met", "source", None)
    assert met[D10].explain(str).startswith("met per source (instant not given)")
    assert met[D10].late_s == 0.0
    missed = by_name(v3_chain(action(None, "determination", actor="importer",
                                     asserted=False)), now)
    o = missed[D10]
    assert (o.status, o.basis, o.late_s, o.late_business_days) == ("missed", "source", None,
                                                                   None)
    assert o.explain(str).startswith("missed per source")
    assert not o.open_miss
    row = next(csv.DictReader(io.StringIO(dl.to_csv([o], ZoneInfo("UTC")))))
    assert (row["late_hours"], row["late_business_days"]) == ("unknown", "unknown")
    assert (row["basis"], row["action"], row["action_at"]) == ("source", "determination", "")
    # the same action also meets the investigation: the source says nothing about it
    assert missed[D45].status == "undetermined"
    assert missed[D45].late_s is None
    # and the results notice it started has no known instant
    notice = missed["results_notice"]
    assert (notice.status, notice.deadline) == ("undetermined", None)
    assert dl.select(list(missed.values()), dl.Selection(status="undetermined")) == [
        missed[D45], notice]


def test_unknown_ladder_reads_every_recorded_deadline_as_met_by_the_resolution():
    c = v3_chain(action(DAY3, "provisional_credit", amount="1.00", currency="USD"))
    c = DeadlineChain(c.dispute_id, c.external_id, "gone", 9, c.deadlines, c.events)
    got = {o.name: o for o in dl.outcomes_of([c], AT10 + timedelta(days=1), lookup, CALS)}
    # the credit meets nothing without the ladder that says so; citations as recorded
    assert (got[D10].status, got[D10].citation) == ("missed", "c10")


def test_lateness_cells_are_blank_unless_the_deadline_is_missed():
    """CSV: blank, JSON: null for met, pending, at_risk and undetermined deadlines (never a
    "0.00" lateness); a miss gives its lateness, or "unknown" / null when only the source
    says it was late."""
    utc = ZoneInfo("UTC")
    just = DEADLINE - timedelta(seconds=1)
    met = one(chain([ENQ, ("CANCELLED", just, "standard", "standard")]))
    pending = one(chain([ENQ]), now=DEADLINE - timedelta(days=5))
    at_risk = one(chain([ENQ]), now=DEADLINE - timedelta(hours=3))
    late = one(chain([ENQ]))
    per_source = by_name(v3_chain(action(None, "determination", actor="importer",
                                         asserted=False)), AT45 + timedelta(days=30))
    assert [o.status for o in (met, pending, at_risk, late)] == [
        "met", "pending", "at_risk", "missed"]
    for o in (met, pending, at_risk, per_source[D45]):
        assert o.status != "missed"
        row = next(csv.DictReader(io.StringIO(dl.to_csv([o], utc))))
        assert (row["late_hours"], row["late_business_days"]) == ("", ""), o.status
        js = dl.json_row_of(o, utc)
        assert (js["late_hours"], js["late_business_days"]) == (None, None), o.status
    row = dl.row_of(late, utc)
    assert (row["late_hours"], row["late_business_days"]) == (
        f"{late.late_s / 3600:.2f}", str(late.late_business_days))
    assert dl.json_row_of(late, utc)["late_business_days"] == late.late_business_days
    unknown = per_source[D10]
    assert (dl.row_of(unknown, utc)["late_hours"], dl.json_row_of(unknown, utc)["late_hours"]) \
        == ("unknown", None)
