"""The fast canonical serialization (``canonical_bytes``) yields exactly the reference bytes."""

from __future__ import annotations

import enum
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from escalation.domain.audit_hash import (
    HASHED_FIELDS,
    canonical_bytes,
    reference_canonical_bytes,
)
from escalation.domain.errors import InvalidInput


class _Kind(enum.StrEnum):
    A = "a"


zones = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)),
                         timezone(timedelta(hours=-8)), timezone(timedelta(seconds=1))])
aware = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1),
                     timezones=zones)
money = st.decimals(min_value=Decimal("-1e12"), max_value=Decimal("1e12"), places=2,
                    allow_nan=False, allow_infinity=False)
decimals = st.decimals(allow_nan=False, allow_infinity=False)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(), aware, money, decimals, st.uuids(),
    st.binary(max_size=8), st.just(_Kind.A),
)
details = st.recursive(
    scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                     st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8)
row = st.fixed_dictionaries(
    {name: scalars for name in HASHED_FIELDS if name != "details"}
    | {"details": st.dictionaries(st.text(max_size=8), details, max_size=4)},
    optional={"recorded_at": aware, "extra": st.text()},
)


@settings(deadline=None)
@given(row)
def test_fast_canonical_bytes_equal_the_reference_on_generated_rows(fields: dict[str, Any]) -> None:
    assert canonical_bytes(fields) == reference_canonical_bytes(fields)


@settings(deadline=None)
@given(st.dictionaries(st.sampled_from(HASHED_FIELDS), scalars, max_size=6))
def test_fast_canonical_bytes_equal_the_reference_with_missing_fields(
    fields: dict[str, Any],
) -> None:
    assert canonical_bytes(fields) == reference_canonical_bytes(fields)


def test_ledger_like_row_with_non_ascii_and_escapes_matches_the_reference() -> None:
    fields: dict[str, Any] = {
        "dispute_id": UUID(int=7), "seq": 3, "event": "PROMOTED", "actor": 'w\u00e9"\\\n\x00',
        "materiality": Decimal("1250.00"), "decided_at": datetime(2026, 1, 1, tzinfo=UTC),
        "due_at": datetime(2026, 1, 1, 3, tzinfo=timezone(timedelta(hours=2))),
        "details": {"z": [1, "\u2028"], "a": {"b": None}}, "fence_token": True,
    }
    assert canonical_bytes(fields) == reference_canonical_bytes(fields)


@pytest.mark.parametrize("bad", [1.5, datetime(2026, 1, 1), Decimal("NaN"), object()])
def test_fast_path_refuses_what_the_reference_refuses(bad: Any) -> None:
    with pytest.raises(InvalidInput):
        canonical_bytes({"actor": bad})
    with pytest.raises(InvalidInput):
        reference_canonical_bytes({"actor": bad})


_SPECIAL = [0x7F, 0x80, 0x9F, 0xA0, 0xAD, 0x2028, 0x2029, 0xD7FF, 0xE000, 0xFEFF, 0xFFFD,
            0xFFFF, 0x10000, 0x1F600, 0x10FFFF]


@pytest.mark.parametrize("block", range(0, 0x800, 0x100))
def test_every_short_code_point_and_the_special_ones_give_the_reference_bytes(
    block: int,
) -> None:
    """Every code point of 1- and 2-byte UTF-8 (control characters, quote, backslash, DEL,
    C1) and the special ones, alone and inside text, as a value and as a details key."""
    points = range(block, block + 0x100) if block else [*range(0x100), *_SPECIAL]
    for cp in points:
        c = chr(cp)
        fields = {"event": c, "trace_id": f"a{c}b{c}", "details": {c: [c, {c + "k": c}]}}
        assert canonical_bytes(fields) == reference_canonical_bytes(fields), hex(cp)


def test_values_the_fast_serialiser_refuses_still_give_the_reference_bytes() -> None:
    """Integers beyond 64 bits take the field-by-field path: same bytes as the reference."""
    for fields in ({"seq": 2**70}, {"fence_token": -(2**64)}, {"details": {"n": [2**65, -1]}}):
        assert canonical_bytes(fields) == reference_canonical_bytes(fields)


def test_a_lone_surrogate_is_refused_like_the_reference() -> None:
    fields = {"trace_id": "a\ud800"}
    with pytest.raises(UnicodeEncodeError):
        reference_canonical_bytes(fields)
    with pytest.raises(UnicodeEncodeError):
        canonical_bytes(fields)
