"""The SLA report (service_layer.sla_report.build) over the fakes' ledger: stays entered,
promoted on time or late (within the grace of the tier's due time), resolved, time in tier;
only what was decided inside the window counts; a bad window is refused naming it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from escalation.domain.calendars import SlaWindow, WindowUnit
from escalation.domain.errors import InvalidInput, InvalidParameter
from escalation.domain.escalation import Status
from escalation.domain.ladder import Ladder, Tier
from escalation.service_layer.sla_report import ReportSla, build, duration_text, to_csv
from tests.fakes import FakeAuditLog, FakeLedgerReports, FakeScheduler, pending, seed

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
LADDER = Ladder(name="dispute_review", version=1,
                tiers=(Tier("standard", "Standard", 10,
                            SlaWindow(24, WindowUnit.CALENDAR_HOURS)),
                       Tier("senior", "Senior", 20, SlaWindow(48, WindowUnit.CALENDAR_HOURS))),
                terminal_tier="senior")


def _ledger() -> FakeAuditLog:
    """Three disputes entered at T0 (due T0 + 24 h): promoted 30 s late (on time within the
    60 s grace), promoted 2 h late, cancelled after 6 h."""
    store, scheduler = FakeAuditLog(), FakeScheduler(now=T0)
    due = T0 + DAY
    for late in (timedelta(seconds=30), timedelta(hours=2)):
        state = seed(store, scheduler, pending(LADDER, "standard", due, entered_tier_at=T0))
        store.append(state, "PROMOTED", "w1", due + late, tier="senior", due_at=due + 3 * DAY)
    state = seed(store, scheduler, pending(LADDER, "standard", due, entered_tier_at=T0))
    store.append(state, "CANCELLED", "jane", T0 + timedelta(hours=6), status=Status.CANCELLED)
    return store


def _figures(report: object) -> dict[str, dict[str, object]]:
    return {f.tier: f.as_row() for f in report.tiers}  # type: ignore[attr-defined]


def test_stays_are_counted_per_tier_on_time_late_and_resolved() -> None:
    report = build(ReportSla(T0, T0 + 5 * DAY), FakeLedgerReports(_ledger(), T0 + 5 * DAY))
    standard = _figures(report)["standard"]
    assert (standard["entered"], standard["promoted_on_time"], standard["promoted_late"],
            standard["breached"], standard["resolved"]) == (3, 1, 1, 2, 1)
    # time in tier: 6 h, 24 h 0.5 min, 26 h; median the middle one
    assert standard["median_time_in_tier_s"] == "86430.000"
    senior = _figures(report)["senior"]
    assert (senior["entered"], senior["breached"]) == (2, 0)


def test_a_smaller_grace_makes_the_30_s_promotion_late() -> None:
    report = build(ReportSla(T0, T0 + 5 * DAY, 10), FakeLedgerReports(_ledger(), T0 + 5 * DAY))
    standard = _figures(report)["standard"]
    assert (standard["promoted_on_time"], standard["promoted_late"]) == (0, 2)


def test_only_what_was_decided_in_the_window_counts() -> None:
    # [T0 + 12 h, T0 + 5 d): the entries and the cancel (T0 + 6 h) are before it
    report = build(ReportSla(T0 + timedelta(hours=12), T0 + 5 * DAY),
                   FakeLedgerReports(_ledger(), T0 + 5 * DAY))
    standard = _figures(report)["standard"]
    assert (standard["entered"], standard["breached"], standard["resolved"]) == (0, 2, 0)
    assert _figures(report)["senior"]["entered"] == 2


def test_the_csv_has_one_line_per_ladder_and_tier() -> None:
    text = to_csv(build(ReportSla(T0, T0 + 5 * DAY), FakeLedgerReports(_ledger(), T0 + 5 * DAY)))
    lines = text.strip().splitlines()
    assert lines[0].startswith("ladder,tier,entered,promoted_on_time")
    assert [ln.split(",")[:3] for ln in lines[1:]] == [
        ["dispute_review", "senior", "2"], ["dispute_review", "standard", "3"]]


def test_a_reversed_window_or_negative_grace_is_refused_naming_the_parameter() -> None:
    source = FakeLedgerReports(_ledger(), T0)
    with pytest.raises(InvalidParameter) as caught:
        build(ReportSla(T0 + DAY, T0), source)
    assert caught.value.params == ("from", "to")
    with pytest.raises(InvalidParameter) as caught:
        build(ReportSla(T0, T0 + DAY, -1), source)
    assert caught.value.params == ("grace_s",)
    with pytest.raises(InvalidInput, match="from"):
        build(ReportSla(T0.replace(tzinfo=None), T0 + DAY), source)


_MS_US = st.integers(0, 10**8).map(lambda ms: ms * 1000)  # decisions are stamped in ms


@given(st.one_of(_MS_US, st.integers(0, 10**11)), st.one_of(_MS_US, st.integers(0, 10**11)))
@example(2_184_319_000, 57_112_418_000)  # 29648.3685 s: .369 from one float, .368 from the other
def test_a_median_shows_the_same_milliseconds_however_its_float_was_computed(
    a_us: int, b_us: int,
) -> None:
    # the recount takes statistics.median ((a + b) / 2), the rollup PostgreSQL's
    # percentile_cont (a + (b - a) * 0.5): the two floats may differ in their last bit, and
    # an exact half millisecond must still show the same digits from both
    a, b = a_us / 1e6, b_us / 1e6
    python, postgres = (a + b) / 2, a + (b - a) * 0.5
    shown = duration_text(python)
    assert shown == duration_text(postgres)
    # and it is the exact median rounded half to even, to the millisecond
    exact = (Decimal(a_us) + Decimal(b_us)) / 2 / Decimal(10**6)
    assert shown == str(exact.quantize(Decimal("0.001"), rounding=ROUND_HALF_EVEN))
