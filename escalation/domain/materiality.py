"""Materiality: the disputed amount as a Decimal quantized to cents.

Money is Decimal end to end (STYLE.md example 2): ``numeric(18,2)`` in PostgreSQL and a
string such as ``"1250.00"`` in Redis and JSON. A float anywhere near money is a bug, so
floats are refused outright rather than converted.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

from escalation.domain.errors import InvalidInput

CENT = Decimal("0.01")
MAX_INTEGER_DIGITS = 15  # numeric(18,2) in PostgreSQL leaves 16; we keep one in reserve


@dataclass(frozen=True, order=True, slots=True)
class Materiality:
    """A non-negative amount in the dispute's currency, quantized to cents.

    Attributes:
        amount: ``Decimal`` with exactly two fractional digits, ``0 <= amount < 10**15``.
    """

    amount: Decimal

    @classmethod
    def parse(cls, value: object) -> Materiality:
        """Build a Materiality from a ``Decimal``, ``int`` or decimal string.

        Rounds half-even to cents (``"10.005"`` -> ``10.00``).

        Raises:
            InvalidInput: ``value`` is a float or bool, not a number, NaN or infinite,
                negative, or has more than 15 integer digits.
        """
        if isinstance(value, Materiality):
            return value
        if isinstance(value, (bool, float)):
            raise InvalidInput(
                f"materiality must be a Decimal or a decimal string, not {type(value).__name__}"
                f" ({value!r}); floats cannot represent cents exactly"
            )
        if isinstance(value, Decimal):
            dec = value
        elif isinstance(value, int):
            dec = Decimal(value)
        elif isinstance(value, str):
            text = value.strip()
            if not text.isascii():
                raise InvalidInput(f"materiality {value!r} must use ASCII digits")
            try:
                dec = Decimal(text)
            except InvalidOperation:
                raise InvalidInput(f"materiality {value!r} is not a decimal number") from None
        else:
            raise InvalidInput(
                f"materiality must be a Decimal or string, not {type(value).__name__}"
            )
        if not dec.is_finite():
            raise InvalidInput(f"materiality must be finite, got {value!r}")
        if dec < 0:
            raise InvalidInput(f"materiality must not be negative, got {value!r}")
        if dec.adjusted() >= MAX_INTEGER_DIGITS:
            raise InvalidInput(
                f"materiality {value!r} has more than {MAX_INTEGER_DIGITS} integer digits"
            )
        quantized = dec.quantize(CENT, rounding=ROUND_HALF_EVEN)
        if quantized.adjusted() >= MAX_INTEGER_DIGITS:
            raise InvalidInput(
                f"materiality {value!r} has more than {MAX_INTEGER_DIGITS} integer digits"
            )
        return cls(quantized)

    def __str__(self) -> str:
        return format(self.amount, "f")


ZERO = Materiality(Decimal("0.00"))
