"""The SLA page's and API's rollup reads on fakes: a rollup not backfilled is refused before
anything is refreshed, the achievement trend's spans (local weeks and months, cut to the
window, across a DST change) and lines, and its chart."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest

from escalation.domain.errors import ErrorCode, InvalidParameter, RollupNotBackfilled, code_of
from escalation.entrypoints import charts
from escalation.service_layer import sla_rollup

NY = ZoneInfo("America/New_York")
NS = "{http://www.w3.org/2000/svg}"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


class StateOnly:
    """A rollup store that answers ``state`` and records every other call (none expected
    when the rollup is not backfilled)."""

    def __init__(self, state: tuple[datetime, datetime, int, UUID | None] | None) -> None:
        self._state = state
        self.calls: list[str] = []

    def state(self) -> tuple[datetime, datetime, int, UUID | None] | None:
        return self._state

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        raise AssertionError(f"{name} called on a rollup that is not backfilled")


@pytest.mark.parametrize("state, why", [
    (None, "no refresh has run"),
    ((utc("2026-12-01T00:00:00+00:00"), utc("2026-12-01T00:00:00+00:00"), 60, UUID(int=5)),
     "backfill is unfinished"),
    ((utc("2026-12-01T00:00:00+00:00"), utc("2026-12-01T00:00:00+00:00"), 61, None),
     "grace of 61 s"),
])
def test_a_rollup_not_backfilled_is_refused_before_anything_is_read_or_written(
        state: Any, why: str) -> None:
    store = StateOnly(state)
    with pytest.raises(RollupNotBackfilled) as caught:
        sla_rollup.served_report(
            sla_rollup.RollupReport(utc("2026-11-01T00:00:00+00:00"),
                                    utc("2026-12-01T00:00:00+00:00")),
            sla_rollup.RollupPorts(store, None, None))  # type: ignore[arg-type]
    assert code_of(caught.value) is ErrorCode.SLA_ROLLUP_NOT_BACKFILLED
    assert why in str(caught.value)
    assert why in caught.value.why and "sla-refresh" not in caught.value.why  # as data
    assert "escalation report sla-refresh" in str(caught.value)
    assert store.calls == []  # no refresh: a backfill in a request would take minutes


def test_a_bad_window_is_refused_before_the_rollup_is_looked_at() -> None:
    store = StateOnly(None)
    with pytest.raises(InvalidParameter) as caught:
        sla_rollup.served_report(
            sla_rollup.RollupReport(utc("2026-12-01T00:00:00+00:00"),
                                    utc("2026-11-01T00:00:00+00:00")),
            sla_rollup.RollupPorts(store, None, None))  # type: ignore[arg-type]
    assert caught.value.field == "from"


def test_weeks_start_on_local_mondays_and_are_cut_to_the_window_across_a_dst_change() -> None:
    since = datetime(2024, 3, 1, tzinfo=NY)  # a Friday, EST
    until = datetime(2024, 3, 20, tzinfo=NY)  # a Wednesday, EDT since 10 March
    got = sla_rollup.spans(since, until, "week", NY)
    assert [s.label for s in got] == ["2024-02-26", "2024-03-04", "2024-03-11", "2024-03-18"]
    assert got[0].start == since and got[-1].end == until
    assert got[1].start == datetime(2024, 3, 4, tzinfo=NY) == utc("2024-03-04T05:00:00+00:00")
    assert got[2].start == utc("2024-03-11T04:00:00+00:00")  # Monday 00:00 EDT
    assert all(a.end == b.start for a, b in itertools.pairwise(got))


def test_months_start_on_the_first_local_day() -> None:
    got = sla_rollup.spans(datetime(2024, 1, 15, tzinfo=NY), datetime(2024, 4, 1, tzinfo=NY),
                           "month", NY)
    assert [(s.label, s.start.astimezone(NY).date().isoformat()) for s in got] == [
        ("2024-01", "2024-01-15"), ("2024-02", "2024-02-01"), ("2024-03", "2024-03-01")]
    assert got[-1].end == datetime(2024, 4, 1, tzinfo=NY)


def test_a_bad_or_too_fine_period_names_the_period_field() -> None:
    since, until = datetime(2020, 1, 1, tzinfo=NY), datetime(2024, 1, 1, tzinfo=NY)
    for period in ("day", "WEEK", ""):
        with pytest.raises(InvalidParameter) as caught:
            sla_rollup.spans(since, until, period, NY)
        assert caught.value.field == "period"
    with pytest.raises(InvalidParameter) as caught:
        sla_rollup.spans(since, until, "week", NY)  # 209 weeks
    assert caught.value.field == "period" and "month" in str(caught.value)
    assert len(sla_rollup.spans(since, until, "month", NY)) == 48


class Outcomes:
    """A rollup store whose ``outcomes`` returns fixed rows."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.bounds: list[datetime] = []

    def outcomes(self, bounds: list[datetime]) -> list[dict[str, Any]]:
        self.bounds = list(bounds)
        return self.rows


def _row(span: int, ladder: str, tier: str, name: str | None, **counts: int) -> dict[str, Any]:
    base = {"achieved": 0, "breached": 0, "met": 0, "missed": 0}
    return {"span": span, "ladder": ladder, "tier": tier, "name": name, **base, **counts}


def test_the_trend_counts_each_line_per_span_and_sums_a_deadline_over_its_tiers() -> None:
    cut = sla_rollup.spans(datetime(2024, 2, 1, tzinfo=NY), datetime(2024, 2, 19, tzinfo=NY),
                           "week", NY)
    assert len(cut) == 3
    store = Outcomes([
        _row(0, "reg_e", "standard", None, achieved=3, breached=1),
        _row(2, "reg_e", "standard", None, achieved=1),
        _row(1, "reg_e", "senior", None),  # nothing decided: no line
        _row(1, "reg_e", "standard", "investigation", met=2, missed=1),
        _row(1, "reg_e", "senior", "investigation", missed=1),  # same deadline, other tier
        _row(2, "reg_e", "senior", "notice"),
    ])
    got = sla_rollup.trend(store, cut)  # type: ignore[arg-type]
    assert store.bounds == [s.start for s in cut] + [cut[-1].end]
    [tier] = got.tiers
    assert (tier.ladder, tier.key, tier.counts) == ("reg_e", "standard", ((3, 1), (0, 0), (1, 0)))
    assert [tier.rate(i) for i in range(3)] == [0.75, None, 1.0]
    assert tier.total == (4, 1)
    [deadline] = got.deadlines
    assert (deadline.key, deadline.counts) == ("investigation", ((0, 0), (2, 2), (0, 0)))
    assert deadline.rate(1) == 0.5


def test_the_achievement_chart_says_each_span_s_rate_and_counts() -> None:
    svg = charts.achievement("t", [("reg_e / standard", [("2024-02-05", 7, 1),
                                                         ("2024-02-12", 0, 0)])],
                             ("achieved", "breached"))
    root = ET.fromstring(svg)  # noqa: S314 - our own generated SVG
    texts = [t.text for t in root.iter(NS + "text")]
    assert "2024-02-05: 87.5 % (7 of 8)" in texts
    assert "2024-02-12: none decided" in texts
    titles = [t.text for r in root.iter(NS + "rect") if (t := r.find(NS + "title")) is not None]
    assert titles == ["reg_e / standard, 2024-02-05: 7 achieved",
                      "reg_e / standard, 2024-02-05: 1 breached"]
