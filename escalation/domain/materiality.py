"""Materiality: the disputed amount as a Decimal in whole cents.

Money is Decimal end to end: ``numeric(18,2)`` in PostgreSQL and a string such as
``"1250.00"`` in Redis and JSON. A float anywhere near money is a bug, so floats are refused
outright rather than converted. Money is never rounded: an amount with a non-zero digit
below the cent (``"0.125"``, ``"1.001"``) is refused, as is any text that is not plain
decimal digits (``"1e3"``, ``"1_000"``, ``"1,000"``, ``"+5"``), since Python's ``Decimal``
would silently accept the exponent and underscore forms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from escalation.domain.errors import InvalidInput

CENT = Decimal("0.01")
MAX_INTEGER_DIGITS = 15  # numeric(18,2) in PostgreSQL leaves 16; we keep one in reserve
_PLAIN_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?")


@dataclass(frozen=True, order=True, slots=True)
class Materiality:
    """A non-negative amount in the dispute's currency, in whole cents.

    Attributes:
        amount: ``Decimal`` with exactly two fractional digits, ``0 <= amount < 10**15``.
    """

    amount: Decimal

    @classmethod
    def parse(cls, value: object) -> Materiality:
        """Build a Materiality from a ``Decimal``, ``int`` or decimal string.

        A string is plain ASCII digits with an optional fractional part (``"1250"``,
        ``"1250.5"``, ``"1250.50"``, ``"1250.500"``); surrounding spaces are ignored. The
        amount is never rounded: zeros below the cent are dropped, any other digit there is
        refused.

        Raises:
            InvalidInput: ``value`` is a float or bool, not plain decimal text (exponent,
                underscore, sign, separator), NaN or infinite, negative, has a non-zero
                digit below the cent, or has more than 15 integer digits.
        """
        if isinstance(value, Materiality):
            return value
        dec = checked_decimal(value)
        cents = dec.quantize(CENT)
        if cents != dec:
            raise _invalid(
                f"materiality {value!r} has digits below a cent; money is never rounded: "
                "give at most two decimal places"
            )
        return cls(cents)

    def __str__(self) -> str:
        return format(self.amount, "f")


def checked_decimal(value: object) -> Decimal:
    """``value`` (a ``Decimal``, ``int`` or plain decimal string, as :meth:`Materiality.parse`
    takes) as a finite, non-negative ``Decimal`` of at most 15 integer digits, unrounded: the
    checks of :meth:`Materiality.parse` but the cent, for amounts whose minor unit depends on
    their currency (``domain.currencies.minor_unit``).

    Raises:
        InvalidInput: as :meth:`Materiality.parse` (the message names ``materiality``).
    """
    if isinstance(value, (bool, float)):
        raise _invalid(
            f"materiality must be a Decimal or a decimal string, not {type(value).__name__}"
            f" ({value!r}); floats cannot represent cents exactly"
        )
    if isinstance(value, Decimal):
        dec = value
    elif isinstance(value, int):
        dec = Decimal(value)
    elif isinstance(value, str):
        dec = _parse_text(value)
    else:
        raise _invalid(
            f"materiality must be a Decimal or string, not {type(value).__name__}"
        )
    if not dec.is_finite():
        raise _invalid(f"materiality must be finite, got {value!r}")
    if dec < 0:
        raise _invalid(f"materiality must not be negative, got {value!r}")
    if dec.adjusted() >= MAX_INTEGER_DIGITS:
        raise _invalid(
            f"materiality {value!r} has more than {MAX_INTEGER_DIGITS} integer digits"
        )
    return dec


def _invalid(message: str) -> InvalidInput:
    """A refusal of an amount: the error names the ``materiality`` field."""
    return InvalidInput(message, field="materiality")


def _parse_text(value: str) -> Decimal:
    """Plain decimal text -> Decimal. Raises InvalidInput (see :meth:`Materiality.parse`)."""
    text = value.strip()
    if not text.isascii():
        raise _invalid(f"materiality {value!r} must use ASCII digits")
    if text.lstrip("+-").lower() in ("nan", "snan", "inf", "infinity"):
        raise _invalid(f"materiality must be finite, got {value!r}")
    if text.startswith("-") and _PLAIN_DECIMAL.fullmatch(text[1:]):
        raise _invalid(f"materiality must not be negative, got {value!r}")
    if not _PLAIN_DECIMAL.fullmatch(text):
        raise _invalid(
            f"materiality {value!r} is not a plain decimal amount such as 1250.00 "
            "(no exponent, underscores, signs or thousands separators)"
        )
    try:
        return Decimal(text)
    except InvalidOperation:  # pragma: no cover - the pattern admits only valid numbers
        raise _invalid(f"materiality {value!r} is not a decimal number") from None

