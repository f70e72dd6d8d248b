"""Calendar arithmetic: Federal Reserve holidays, DST both ways, business days and hours."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import holidays
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from escalation.adapters.calendar_files import load_calendars
from escalation.domain.calendars import (
    US_FEDERAL_RESERVE,
    UTC_CALENDAR,
    BusinessCalendar,
    SlaWindow,
    WindowUnit,
    fixed_holidays,
    is_fed_holiday,
    window_end,
)
from escalation.domain.errors import ConfigError, InvalidInput

NY = ZoneInfo("America/New_York")
FED = US_FEDERAL_RESERVE
U = WindowUnit


def ny(*args: int) -> datetime:
    return datetime(*args, tzinfo=NY)  # type: ignore[misc]


# -- Federal Reserve holidays ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("day", "closed"),
    [
        (date(2021, 7, 5), True),  # Independence Day on Sunday 2021-07-04 -> closed Monday
        (date(2022, 12, 26), True),  # Christmas on Sunday 2022-12-25 -> closed Monday
        (date(2022, 6, 20), True),  # Juneteenth on Sunday 2022-06-19 -> closed Monday
        (date(2021, 12, 24), False),  # Christmas on Saturday 2021-12-25 -> Friday OPEN
        (date(2021, 12, 31), False),  # New Year on Saturday 2022-01-01 -> Friday OPEN
        (date(2026, 7, 3), False),  # Independence Day on Saturday 2026-07-04: Friday OPEN
        (date(2026, 11, 26), True),  # Thanksgiving
        (date(2026, 10, 12), True),  # Columbus Day (a Fed holiday, not an NYSE one)
        (date(2026, 11, 27), False),  # the Friday after Thanksgiving is a Fed business day
    ],
)
def test_fed_saturday_and_sunday_rule(day: date, closed: bool) -> None:
    assert is_fed_holiday(day) is closed
    assert FED.is_business_day(day) is not closed


def _reference_fed_closed_days(year: int) -> set[date]:
    """The Federal Reserve rule written out (the rule this service used before it read the
    ``holidays`` package's XFED table): the federal holidays on their actual dates, a Sunday
    holiday closes the Monday after, a Saturday holiday leaves the Friday before open (the
    Saturday stays listed). Source: the Reserve Banks' published holiday schedules."""
    closed: set[date] = set()
    federal = holidays.country_holidays("US", years=[year - 1, year, year + 1], observed=False)
    for holiday in federal:
        day = holiday + timedelta(days=1) if holiday.isoweekday() == 7 else holiday
        if day.year == year:
            closed.add(day)
    return closed


def test_fed_calendar_equals_the_written_rule_on_every_date_1999_2060() -> None:
    """The XFED table the calendar reads gives the same closed days as the written rule, on
    every date (weekends included) of the range ladders rely on."""
    reference = {year: _reference_fed_closed_days(year) for year in range(1999, 2061)}
    differ = [d for year, closed in reference.items() for d in _days_of(year)
              if is_fed_holiday(d) != (d in closed)]
    assert differ == []
    assert sum(is_fed_holiday(d) for d in _days_of(2024)) == 11
    assert not FED.is_business_day(date(2022, 6, 20))  # Juneteenth 2022 (Sunday) -> Monday
    assert FED.is_business_day(date(2021, 6, 18))  # Juneteenth 2021 (Saturday): Friday open


def _days_of(year: int) -> list[date]:
    start = date(year, 1, 1)
    return [start + timedelta(days=i) for i in range((date(year + 1, 1, 1) - start).days)]


def test_fed_calendar_version_names_the_holidays_package_version() -> None:
    assert FED.version.endswith(f"holidays-{holidays.__version__}")


# -- calendar units and DST -----------------------------------------------------------------


def test_one_calendar_day_across_spring_forward_is_23_elapsed_hours() -> None:
    start = ny(2026, 3, 7, 12, 0)
    end = FED.add(start, 1, U.CALENDAR_DAYS)
    assert end.astimezone(NY) == ny(2026, 3, 8, 12, 0)
    assert end - start == timedelta(hours=23)


def test_one_calendar_day_across_fall_back_is_25_elapsed_hours() -> None:
    start = ny(2026, 10, 31, 12, 0)
    end = FED.add(start, 1, U.CALENDAR_DAYS)
    assert end.astimezone(NY) == ny(2026, 11, 1, 12, 0)
    assert end - start == timedelta(hours=25)


def test_calendar_hours_are_elapsed_time_across_dst() -> None:
    start = ny(2026, 3, 7, 12, 0)
    assert FED.add(start, 24, U.CALENDAR_HOURS) - start == timedelta(hours=24)
    assert FED.add(start, 90, U.CALENDAR_MINUTES) - start == timedelta(minutes=90)


def test_wall_time_in_the_gap_resolves_to_the_earlier_instant() -> None:
    start = ny(2026, 3, 7, 2, 30)  # 02:30 does not exist on 2026-03-08
    end = FED.add(start, 1, U.CALENDAR_DAYS)
    assert end == datetime(2026, 3, 8, 6, 30, tzinfo=UTC)  # 01:30 EST, before the gap


def test_ambiguous_wall_time_takes_first_occurrence() -> None:
    start = ny(2026, 10, 31, 1, 30)  # 01:30 happens twice on 2026-11-01
    end = FED.add(start, 1, U.CALENDAR_DAYS)
    assert end == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)  # 01:30 EDT


def test_calendar_days_in_other_zones() -> None:
    berlin = BusinessCalendar(
        "eu", "1", ZoneInfo("Europe/Berlin"), frozenset(range(1, 6)), time(9), time(17)
    )
    start = datetime(2026, 3, 28, 12, 0, tzinfo=ZoneInfo("Europe/Berlin"))  # DST on 03-29
    assert berlin.add(start, 1, U.CALENDAR_DAYS) - start == timedelta(hours=23)
    tokyo = BusinessCalendar(
        "jp", "1", ZoneInfo("Asia/Tokyo"), frozenset(range(1, 6)), time(9), time(17)
    )
    s2 = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
    assert tokyo.add(s2, 1, U.CALENDAR_DAYS) - s2 == timedelta(hours=24)  # no DST in Japan


# -- business days and hours ----------------------------------------------------------------


def test_business_days_end_at_close_of_nth_business_day_skipping_weekend() -> None:
    start = ny(2026, 3, 5, 10, 0)  # Thursday
    assert FED.add(start, 1, U.BUSINESS_DAYS) == ny(2026, 3, 6, 17, 0)  # Friday close
    assert FED.add(start, 2, U.BUSINESS_DAYS) == ny(2026, 3, 9, 17, 0)  # Monday close


def test_business_days_ignore_time_of_day_of_start() -> None:
    early, late = ny(2026, 3, 2, 8, 0), ny(2026, 3, 2, 22, 0)  # Monday
    assert FED.add(early, 1, U.BUSINESS_DAYS) == FED.add(late, 1, U.BUSINESS_DAYS)


def test_business_days_skip_fed_holiday_and_weekend() -> None:
    start = ny(2026, 11, 25, 10, 0)  # Wednesday before Thanksgiving
    # Thu 26 holiday, Fri 27 = 1st, Mon 30 = 2nd
    assert FED.add(start, 2, U.BUSINESS_DAYS) == ny(2026, 11, 30, 17, 0)


def test_ten_business_days_from_a_saturday_notice() -> None:
    start = ny(2026, 1, 10, 11, 0)  # Saturday; MLK day Monday 2026-01-19
    assert FED.add(start, 10, U.BUSINESS_DAYS) == ny(2026, 1, 26, 17, 0)


def test_business_hours_count_only_working_hours() -> None:
    friday_afternoon = ny(2026, 3, 6, 15, 0)
    assert FED.add(friday_afternoon, 4, U.BUSINESS_HOURS) == ny(2026, 3, 9, 11, 0)
    before_open = ny(2026, 3, 9, 6, 0)
    assert FED.add(before_open, 8, U.BUSINESS_HOURS) == ny(2026, 3, 9, 17, 0)  # ends at close


def test_business_hours_skip_holiday() -> None:
    start = ny(2026, 11, 25, 16, 0)
    assert FED.add(start, 2, U.BUSINESS_HOURS) == ny(2026, 11, 27, 10, 0)


def test_a_resumed_pause_walks_working_hours_as_a_business_hours_window() -> None:
    # one walk: the remainder of a paused window (open ms) ends where a window of as many
    # business hours would, across a weekend and a holiday, minute fractions included
    from escalation.domain.sla_timing import advance_open_ms

    start = ny(2026, 11, 25, 16, 30)  # the day before Thanksgiving
    for hours in (1, 2, 9, 30):
        assert advance_open_ms(FED, start, hours * 3_600_000) == FED.add(start, hours,
                                                                          U.BUSINESS_HOURS)
    assert advance_open_ms(FED, start, 90 * 60_000 + 1) == ny(2026, 11, 27, 10, 0) + timedelta(
        milliseconds=1)


def test_utc_calendar_counts_business_units_as_calendar_units() -> None:
    start = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
    assert UTC_CALENDAR.add(start, 2, U.BUSINESS_DAYS) == start + timedelta(days=2)


def test_naive_start_is_refused() -> None:
    with pytest.raises(InvalidInput):
        FED.add(datetime(2026, 3, 7, 12, 0), 1, U.CALENDAR_DAYS)


def test_window_end_refuses_unknown_calendar() -> None:
    with pytest.raises(InvalidInput, match="unknown calendar"):
        window_end(ny(2026, 1, 1), SlaWindow(1, U.CALENDAR_DAYS, "nope"), {"utc": UTC_CALENDAR})


def test_calendar_without_working_days_is_refused() -> None:
    with pytest.raises(InvalidInput, match="working_days"):
        BusinessCalendar("x", "1", NY, frozenset(), time(9), time(17))


# -- properties -----------------------------------------------------------------------------

instants = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2030, 12, 31), timezones=st.just(UTC)
)
units = st.sampled_from(list(WindowUnit))
# no per-example deadline: the first business-unit example builds the Federal Reserve holiday
# table (holidays.financial_holidays, ~0.2 s of CPU), past Hypothesis's 200 ms when a test
# runs alone (-k) on a loaded machine; the unit tier's 10 s timeout still stops a hang
FED_PROPERTY = settings(deadline=None)


@FED_PROPERTY
@given(a=instants, b=instants, n=st.integers(1, 30), unit=units)
def test_addition_is_monotonic_in_start(a: datetime, b: datetime, n: int, unit: U) -> None:
    lo, hi = min(a, b), max(a, b)
    assert FED.add(lo, n, unit) <= FED.add(hi, n, unit)


@FED_PROPERTY
@given(start=instants, n=st.integers(1, 30), unit=units)
def test_addition_is_monotonic_in_window(start: datetime, n: int, unit: U) -> None:
    assert start < FED.add(start, n, unit) <= FED.add(start, n + 1, unit)


@FED_PROPERTY
@given(start=instants, m=st.integers(1, 20), n=st.integers(1, 20))
def test_composing_business_days_equals_their_sum(start: datetime, m: int, n: int) -> None:
    u = U.BUSINESS_DAYS
    assert FED.add(FED.add(start, m, u), n, u) == FED.add(start, m + n, u)


@FED_PROPERTY
@given(start=instants, m=st.integers(1, 60), n=st.integers(1, 60))
def test_composing_business_hours_equals_their_sum(start: datetime, m: int, n: int) -> None:
    u = U.BUSINESS_HOURS
    assert FED.add(FED.add(start, m, u), n, u) == FED.add(start, m + n, u)


@given(start=instants, m=st.integers(1, 40), n=st.integers(1, 40))
def test_composed_calendar_days_never_end_after_their_sum(start: datetime, m: int, n: int) -> None:
    u = U.CALENDAR_DAYS
    assert FED.add(FED.add(start, m, u), n, u) <= FED.add(start, m + n, u)


# -- calendar files -------------------------------------------------------------------------


def test_load_calendars_without_file_has_builtins() -> None:
    assert set(load_calendars(None)) == {"utc", "us_federal_reserve", "institution"}


def test_calendar_file_defines_a_calendar_on_the_fed_base(tmp_path: Path) -> None:
    f = tmp_path / "calendars.toml"
    f.write_text(
        '[[calendars]]\nid = "acme"\nbase = "us_federal_reserve"\ntz = "America/Chicago"\n'
        'working_days = ["mon","tue","wed","thu","fri","sat"]\n'
        'hours = { open = "08:00", close = "18:00" }\nholidays = [2026-12-24]\n'
    )
    acme = load_calendars(f)["acme"]
    assert isinstance(acme, BusinessCalendar)
    assert acme.is_business_day(date(2026, 3, 7))  # Saturday works here
    assert not acme.is_business_day(date(2026, 12, 24))  # own holiday
    assert not acme.is_business_day(date(2026, 11, 26))  # inherited Thanksgiving
    start = datetime(2026, 3, 6, 10, 0, tzinfo=ZoneInfo("America/Chicago"))
    assert acme.add(start, 1, U.BUSINESS_DAYS) == datetime(
        2026, 3, 7, 18, 0, tzinfo=ZoneInfo("America/Chicago")
    )
    assert "us_federal_reserve@" in acme.version


def test_calendar_file_24h_close_means_midnight(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('[[calendars]]\nid = "ops"\ntz = "UTC"\nhours = {open="00:00", close="24:00"}\n')
    ops = load_calendars(f)["ops"]
    start = datetime(2026, 3, 2, 23, 0, tzinfo=UTC)  # Monday
    assert ops.add(start, 2, U.BUSINESS_HOURS) == datetime(2026, 3, 3, 1, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('[[calendars]]\nid = "x"\ntz = "Mars/Olympus"\n', "calendars[0].tz"),
        ('[[calendars]]\nid = "utc"\ntz = "UTC"\n', "calendars[0].id"),
        ('[[calendars]]\nid = "x"\nbase = "nope"\n', "calendars[0].base"),
        ('[[calendars]]\nid = "x"\ntz = "UTC"\nworking_days = ["funday"]\n', "working_days"),
        ('[[calendars]]\nid = "x"\ntz = "UTC"\nhours = {open="18:00", close="09:00"}\n', "[0]"),
    ],
)
def test_bad_calendar_file_is_refused_naming_file_and_field(
    tmp_path: Path, body: str, field: str
) -> None:
    f = tmp_path / "cal.toml"
    f.write_text(body)
    with pytest.raises(ConfigError) as exc:
        load_calendars(f)
    assert str(f) in str(exc.value)
    assert field in str(exc.value)


def test_fixed_holidays_predicate() -> None:
    pred = fixed_holidays([date(2026, 1, 2)])
    assert pred(date(2026, 1, 2))
    assert not pred(date(2026, 1, 3))
