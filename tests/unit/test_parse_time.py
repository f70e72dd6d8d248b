"""``parse_time``: ISO-8601 instants with an offset; a date alone is refused as a date."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from escalation.domain.errors import InvalidInput
from escalation.entrypoints.cli_common import parse_time, parse_time_or_date


def test_an_instant_with_offset_is_read_as_utc() -> None:
    got = parse_time("2026-11-30T09:00:00-05:00", "opened_at")
    assert got == datetime(2026, 11, 30, 14, tzinfo=UTC)
    assert parse_time(None, "opened_at") is None


@pytest.mark.parametrize("value", ["2026-11-30", "20261130", "2026-W49-1"])
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
