"""How a window is split between the SLA rollup's hour counts and its rows
(``adapters.sla_rollup._pieces``), and that the console's time-in-tier chart asks for the
buckets the hour counts keep (else every SLA page would count its window from the rows)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from escalation.adapters.sla_rollup import HOUR_BUCKET_UPPERS_S, _pieces
from escalation.entrypoints import charts

H = timedelta(hours=1)


def test_the_charts_buckets_are_the_counted_ones() -> None:
    assert tuple(upper for _label, upper in charts.BUCKETS[:-1]) == HOUR_BUCKET_UPPERS_S


def test_a_window_on_the_hour_is_all_whole_hours() -> None:
    since = datetime(2026, 3, 1, tzinfo=UTC)
    assert _pieces([since, since + 5 * H]) == ((since, since + 5 * H), [], [])


def test_edges_off_the_hour_are_read_from_the_rows() -> None:
    # 09:20 to 14:05: whole hours 10:00-14:00; rows 09:20-10:00 and 14:00-14:05
    since = datetime(2026, 3, 1, 9, 20, tzinfo=UTC)
    until = datetime(2026, 3, 1, 14, 5, tzinfo=UTC)
    ten, two = since.replace(hour=10, minute=0), until.replace(minute=0)
    assert _pieces([since, until]) == ((ten, two), [], [(since, ten), (two, until)])


def test_a_span_bound_inside_an_hour_makes_that_hour_read_from_the_rows() -> None:
    # a local midnight at UTC+05:30 (18:30 UTC) cuts the 18:00 hour; a bound on the hour
    # (20:00) cuts none
    since, until = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC)
    cut = datetime(2026, 3, 1, 18, 30, tzinfo=UTC)
    whole, hours, rows = _pieces([since, cut, cut.replace(hour=20, minute=0), until])
    assert whole == (since, until)
    assert hours == [cut.replace(minute=0)]
    assert rows == [(cut.replace(minute=0), cut.replace(minute=0) + H)]


def test_a_window_inside_one_hour_is_read_from_the_rows() -> None:
    since = datetime(2026, 3, 1, 9, 10, tzinfo=UTC)
    assert _pieces([since, since + timedelta(minutes=30)]) == (
        None, [], [(since, since + timedelta(minutes=30))])


def test_bounds_in_another_zone_are_compared_in_utc() -> None:
    from zoneinfo import ZoneInfo
    ny = ZoneInfo("America/New_York")
    since = datetime(2026, 3, 1, 0, 0, tzinfo=ny)  # 05:00 UTC, on the hour
    until = since + 3 * H
    whole, hours, rows = _pieces([since, until])
    assert whole == (since.astimezone(UTC), until.astimezone(UTC)) and rows == [] == hours
