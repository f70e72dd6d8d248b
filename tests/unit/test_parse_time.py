"""``parse_time``: ISO-8601 instants with an offset; a date alone is refused as a date."""

from __future__ import annotations

from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import pytest

from escalation.domain.calendars import parse_wall_time
from escalation.domain.errors import InvalidInput
from escalation.domain.timeutil import parse_time, parse_time_or_date


def test_an_instant_with_offset_is_read_as_utc() -> None:
    got = parse_time("2026-11-30T09:00:00-05:00", "opened_at")
    assert got == datetime(2026, 11, 30, 14, tzinfo=UTC)
    assert parse_time(None, "opened_at") is None


@pytest.mark.parametrize("value", ["2026-11-30", "20261130"])
def test_a_date_alone_is_refused_naming_what_is_needed(value: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_time(value, "opened_at")
    msg = str(info.value)
    assert msg.startswith(f"opened_at: a date alone ({value!r}) is not accepted")
    assert "ISO-8601 time with offset, e.g. 2026-11-30T09:00:00-05:00" in msg
    assert "naive" not in msg  # never blames a midnight the caller did not write


def test_a_time_without_offset_is_still_refused_as_naive() -> None:
    with pytest.raises(InvalidInput, match="must be timezone-aware"):
        parse_time("2026-11-30T09:00:00", "due_at")


def test_where_dates_are_taken_every_date_form_is_a_date() -> None:
    assert parse_time_or_date("2026-11-30", "--due-at") == date(2026, 11, 30)
    assert parse_time_or_date("20261130", "--due-at") == date(2026, 11, 30)


def _every_parser(value: str, name: str) -> list[object]:
    """What the API and the CLI (``parse_time``, ``parse_time_or_date``) and the import
    (``parse_wall_time``) make of ``value``."""
    return [parse_time(value, name), parse_time_or_date(value, name),
            parse_wall_time(value, ZoneInfo("America/New_York"), name)[0]]


@pytest.mark.parametrize("value", ["2026-12-08t09:00:00z", "2026-12-08T09:00:00z",
                                   "2026-12-08t09:00:00Z", "2026-12-08t09:00:00+00:00"])
def test_lower_case_t_and_z_are_read_as_rfc_3339_allows(value: str) -> None:
    assert _every_parser(value, "due_at") == [datetime(2026, 12, 8, 9, tzinfo=UTC)] * 3


@pytest.mark.parametrize("value", ["2026-W49-1T09:00:00Z", "2026W491T0900Z", "2026-W49-1",
                                   "2026-w49-1T09:00:00Z", "2026-W49"])
def test_a_week_date_is_refused_naming_the_field(value: str) -> None:
    for parse in (lambda v: parse_time(v, "due_at"), lambda v: parse_time_or_date(v, "due_at"),
                  lambda v: parse_wall_time(v, ZoneInfo("UTC"), "due_at")):
        with pytest.raises(InvalidInput, match=r"^due_at: an ISO 8601 week date") as info:
            parse(value)
        assert info.value.field == "due_at"


@pytest.mark.parametrize("value", ["2026-12-08T10:00:00.1234567Z",
                                   "2026-12-08T10:00:00,1234567+00:00",
                                   "2026-12-08 10:00:00.000000000Z"])
def test_a_fraction_past_microseconds_is_refused_never_truncated(value: str) -> None:
    for parse in (lambda v: parse_time(v, "due_at"), lambda v: parse_time_or_date(v, "due_at"),
                  lambda v: parse_wall_time(v, ZoneInfo("UTC"), "due_at")):
        with pytest.raises(InvalidInput, match=r"^due_at: at most 6 fractional") as info:
            parse(value)
        assert info.value.field == "due_at"


def test_six_fractional_digits_are_kept_exactly() -> None:
    assert _every_parser("2026-12-08T10:00:00.123456Z", "due_at") == [
        datetime(2026, 12, 8, 10, 0, 0, 123456, tzinfo=UTC)] * 3
