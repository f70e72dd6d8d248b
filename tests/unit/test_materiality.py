"""Materiality: Decimal cents, floats refused."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from escalation.domain.errors import InvalidInput
from escalation.domain.materiality import Materiality


@pytest.mark.parametrize(
    "value",
    [
        1.5,
        0.0,
        True,
        False,
        "NaN",
        Decimal("NaN"),
        "inf",
        Decimal("-Infinity"),
        "abc",
        None,
        [1],
        "-0.01",
        Decimal(-1),
        -5,
        "1" + "0" * 15,
        Decimal("1e15"),
        # never rounded: a non-zero digit below the cent is refused
        "0.125",
        "1.001",
        "10.005",
        Decimal("0.125"),
        # not plain decimal text (Decimal() would accept the first two)
        "1e3",
        "1_000",
        "1,000",
        "+5",
        "1E+3",
        "",
        ".",
        "5.",
    ],
)
def test_bad_materiality_is_refused(value: object) -> None:
    with pytest.raises(InvalidInput):
        Materiality.parse(value)


def test_float_refusal_says_why() -> None:
    with pytest.raises(InvalidInput, match="float"):
        Materiality.parse(12.5)


def test_sub_cent_refusal_says_money_is_never_rounded() -> None:
    with pytest.raises(InvalidInput, match="below a cent; money is never rounded"):
        Materiality.parse("0.125")
    with pytest.raises(InvalidInput, match="no exponent, underscores"):
        Materiality.parse("1_000")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("10.500", "10.50"),  # zeros below the cent lose nothing
        ("10.5", "10.50"),
        (" 1250 ", "1250.00"),
        (7, "7.00"),
        (Decimal("0.1"), "0.10"),
        ("999999999999999.99", "999999999999999.99"),
        ("0", "0.00"),
    ],
)
def test_materiality_is_exact_cents(value: object, text: str) -> None:
    assert str(Materiality.parse(value)) == text


def test_fifteen_integer_digits_is_the_maximum() -> None:
    assert Materiality.parse("9" * 15).amount == Decimal("9" * 15 + ".00")
    with pytest.raises(InvalidInput, match="15 integer digits"):
        Materiality.parse("9" * 16)


def test_string_form_is_plain_not_scientific() -> None:
    assert str(Materiality.parse(Decimal("1E+3"))) == "1000.00"


@given(st.decimals(min_value=0, max_value=Decimal("99999999999999.99"), places=2))
def test_string_round_trip(amount: Decimal) -> None:
    m = Materiality.parse(amount)
    assert Materiality.parse(str(m)) == m
    assert m.amount == amount


@given(st.integers(0, 10**14), st.integers(0, 10**14))
def test_order_follows_amount(a: int, b: int) -> None:
    assert (Materiality.parse(a) < Materiality.parse(b)) == (a < b)
