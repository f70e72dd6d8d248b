"""The ISO 4217 table of money actions (domain.currencies)."""

from __future__ import annotations

import pytest

from escalation.domain.currencies import ISO_4217, check_currency
from escalation.domain.errors import InvalidInput


@pytest.mark.parametrize("code", ["USD", "EUR", "JPY", "XCG", "ZWG", "SLE", "VES", "MRU"])
def test_active_codes_pass(code: str) -> None:
    assert check_currency(code) == code


@pytest.mark.parametrize("code", ["XXQ", "HRK", "ANG", "ZWL", "VEF", "XTS", "XXX", "usd",
                                  "US$", "", None])
def test_other_codes_are_refused_naming_the_field(code: str | None) -> None:
    with pytest.raises(InvalidInput, match=r"^currency: not an active ISO 4217"):
        check_currency(code)


def test_the_table_holds_three_capital_letters_only() -> None:
    assert len(ISO_4217) > 150
    assert all(len(c) == 3 and c.isascii() and c.isalpha() and c.isupper() for c in ISO_4217)
