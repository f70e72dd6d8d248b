"""The relative due time (``due_in``): its two spellings and what is refused, naming the
field (escalation.domain.timeutil.parse_duration)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from escalation.domain.errors import InvalidParameter
from escalation.domain.timeutil import parse_duration


@pytest.mark.parametrize(("text", "expected"), [
    ("36h", timedelta(hours=36)), ("2d", timedelta(days=2)), ("1h30m", timedelta(minutes=90)),
    ("45s", timedelta(seconds=45)), ("0s", timedelta(0)), (" 90m ", timedelta(minutes=90)),
    ("PT36H", timedelta(hours=36)), ("P1DT2H30M", timedelta(days=1, hours=2, minutes=30)),
    ("p2d", timedelta(days=2)), ("PT0S", timedelta(0)),
])
def test_durations_in_both_spellings(text: str, expected: timedelta) -> None:
    assert parse_duration(text, "due_in") == expected


@pytest.mark.parametrize("text", ["", "P", "PT", "P1DT", "-1h", "1.5h", "P1Y", "P1M", "P2W",
                                  "2w", "h", "1h 30m", "30m1h", "99999999999999d"])
def test_anything_else_is_refused_naming_the_field(text: str) -> None:
    with pytest.raises(InvalidParameter, match=r"^due_in ") as refused:
        parse_duration(text, "--due-in")
    assert refused.value.params[0] == "due_in"  # the API's errors[].field
    assert refused.value.render(lambda p: "--" + p.replace("_", "-")).startswith("--due-in ")


def test_none_is_none() -> None:
    assert parse_duration(None, "due_in") is None
