"""The console's pending-list filters refuse what PostgreSQL cannot compare, naming the
parameter: a NUL byte in a ladder or tier name used to reach the query and answer 500."""

from __future__ import annotations

import pytest

from escalation.domain.errors import InvalidInput
from escalation.ports import PendingFilter


@pytest.mark.parametrize("field", ["ladder", "tier"])
@pytest.mark.parametrize("text", ["senior\x00", "a\nb", "\x7f"])
def test_a_control_character_in_a_name_is_refused_naming_the_parameter(field: str,
                                                                       text: str) -> None:
    with pytest.raises(InvalidInput) as err:
        PendingFilter(**{field: text})  # type: ignore[arg-type]
    assert err.value.field == field


def test_printable_names_and_no_names_are_accepted() -> None:
    assert PendingFilter(ladder="reg-e", tier="Senior review é").tier == "Senior review é"
    assert PendingFilter().ladder is None


def test_the_last_calendar_date_as_an_end_bound_is_refused_naming_it() -> None:
    """``to=9999-12-31`` means up to the start of the next day, which no datetime can hold:
    a 422 naming ``to``, not an OverflowError (500)."""
    from zoneinfo import ZoneInfo

    from escalation.entrypoints.api.console.routes import parse_instant

    zone = ZoneInfo("America/New_York")
    with pytest.raises(InvalidInput) as err:
        parse_instant("9999-12-31", "to", zone, end=True)
    assert err.value.field == "to"
    start = parse_instant("9999-12-31", "from", zone)
    assert start is not None and start.year == 9999
