"""Canonical serialization and hash chain of the audit ledger (pure, no database)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from escalation.domain.audit_hash import (
    GENESIS,
    HASHED_FIELDS,
    canonical_bytes,
    canonical_json,
    canonical_string,
    decode_canonical_json,
    is_canonical_json,
    row_hash,
    stored_canonical_bytes,
    verify_chain,
)
from escalation.domain.errors import InvalidInput
from tests.unit.property_budget import examples

PINNED_DIGEST = "aff4b44c39f00e8157070a09716cabbca387704705ed84dd08d0494198a227dd"
DISPUTE = UUID("6F1C4A52-0B7E-4F7A-9C1D-3E5B2A4C6D8E")


def _fields(seq: int = 1, **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "dispute_id": DISPUTE,
        "seq": seq,
        "event": "PROMOTED",
        "match_decision": "PROMOTED_TO_SENIOR",
        "from_tier": "standard",
        "to_tier": "senior",
        "ladder": "dispute_review",
        "ladder_version": 1,
        "calendar_version": None,
        "materiality": Decimal("1250.00"),
        "due_at": datetime(2026, 3, 2, 9, 0, tzinfo=UTC),
        "next_due_at": datetime(2026, 3, 4, 9, 0, 0, 123456, tzinfo=UTC),
        "regulatory_deadline": None,
        "decided_at": datetime(2026, 3, 2, 9, 0, 0, 5, tzinfo=UTC),
        "actor": "worker-1",
        "trace_id": "t-1",
        "source_hash": "ab" * 32,
        "external_id": None,
        "fence_token": 7,
        "details": {"b": [1, "x"], "a": None},
    }
    base.update(over)
    return base


def _chain(n: int) -> list[dict[str, Any]]:
    rows, prev = [], GENESIS
    for seq in range(1, n + 1):
        row = _fields(seq)
        row["prev_hash"] = prev
        row["row_hash"] = prev = row_hash(prev, row)
        rows.append(row)
    return rows


def test_canonical_bytes_are_sorted_compact_json_with_documented_value_forms():
    text = canonical_bytes(_fields()).decode("utf-8")
    assert text.startswith('{"actor":"worker-1","calendar_version":null,')
    assert " " not in text
    assert '"materiality":"1250.00"' in text
    assert '"dispute_id":"6f1c4a52-0b7e-4f7a-9c1d-3e5b2a4c6d8e"' in text
    assert '"decided_at":"2026-03-02T09:00:00.000005Z"' in text
    assert '"details":{"a":null,"b":[1,"x"]}' in text


def test_canonical_bytes_are_stable_for_a_known_row():
    # Pinned digest: changing the serialization breaks every stored chain, so it must be
    # a deliberate, versioned change (HASH_VERSION), never an accident.
    digest = hashlib.sha256(canonical_bytes(_fields())).hexdigest()
    assert digest == hashlib.sha256(canonical_bytes(dict(reversed(_fields().items())))).hexdigest()
    assert digest == PINNED_DIGEST


def test_same_instant_in_another_zone_hashes_identically():
    cet = timezone(timedelta(hours=1))
    a = _fields(decided_at=datetime(2026, 3, 2, 10, 0, 0, 5, tzinfo=cet))
    assert canonical_bytes(a) == canonical_bytes(_fields())


def test_naive_datetime_is_refused():
    with pytest.raises(InvalidInput, match="decided_at"):
        canonical_bytes(_fields(decided_at=datetime(2026, 3, 2, 9, 0)))


def test_float_is_refused_even_inside_details():
    with pytest.raises(InvalidInput, match="float"):
        canonical_bytes(_fields(materiality=1250.0))
    with pytest.raises(InvalidInput, match=r"details\.x"):
        canonical_bytes(_fields(details={"x": 0.1}))


def test_decimal_keeps_its_cents_and_differs_from_an_unquantized_value():
    assert b'"materiality":"0.10"' in canonical_bytes(_fields(materiality=Decimal("0.10")))
    assert canonical_bytes(_fields(materiality=Decimal("0.1"))) != canonical_bytes(
        _fields(materiality=Decimal("0.10"))
    )


def test_what_orjson_refuses_is_rendered_by_the_definition_or_refused_as_it_does():
    import json

    from tests.unit import spec_verifier

    # an integer beyond 64 bits: json.dumps, the definition, writes it exactly
    big = canonical_bytes(_fields(fence_token=2**70, details={"n": -(2**65)}))
    assert b'"fence_token":1180591620717411303424' in big
    assert b'"details":{"n":-36893488147419103232}' in big
    doc = json.loads(big)
    assert big == json.dumps(doc, sort_keys=True, separators=(",", ":"),
                             ensure_ascii=False).encode("utf-8")
    exported = {**doc, "fence_token": 2**70}
    assert spec_verifier.canonical(exported) == big
    # a lone surrogate has no UTF-8 bytes: refused, never replaced
    with pytest.raises(UnicodeEncodeError):
        canonical_bytes(_fields(actor="a\ud800b"))


def test_recorded_at_and_hash_columns_are_not_hashed():
    base = canonical_bytes(_fields())
    extra = _fields(recorded_at=datetime.now(UTC), prev_hash=b"x" * 32, row_hash=b"y" * 32)
    assert canonical_bytes(extra) == base
    assert set(HASHED_FIELDS).isdisjoint({"recorded_at", "prev_hash", "row_hash"})


def test_row_hash_is_sha256_of_prev_hash_then_canonical_bytes():
    prev = bytes(range(32))
    expected = hashlib.sha256(prev + canonical_bytes(_fields())).digest()
    assert row_hash(prev, _fields()) == expected
    assert len(expected) == 32


def test_row_hash_refuses_a_prev_hash_that_is_not_32_bytes():
    with pytest.raises(InvalidInput, match="32 bytes"):
        row_hash(b"short", _fields())


def test_intact_chain_verifies():
    assert verify_chain(_chain(5)) is None
    assert verify_chain([]) is None


def test_edited_row_is_reported_at_its_seq():
    rows = _chain(5)
    rows[2]["to_tier"] = "compliance"
    assert verify_chain(rows) == 3


def test_missing_middle_row_is_reported_as_the_missing_seq():
    rows = _chain(5)
    del rows[1]
    assert verify_chain(rows) == 2


def test_relinked_row_with_recomputed_hash_breaks_the_next_link():
    rows = _chain(4)
    rows[1]["actor"] = "mallory"
    rows[1]["row_hash"] = row_hash(rows[1]["prev_hash"], rows[1])
    assert verify_chain(rows) == 3


def test_first_row_must_start_from_genesis():
    rows = _chain(2)
    rows[0]["prev_hash"] = b"\x01" * 32
    assert verify_chain(rows) == 1


# ------------------------------------------------------------- one renderer, two shapes
_text = st.text(max_size=12)
_plain_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
              _text),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(_text, inner, max_size=3)),
    max_leaves=10)
_aware = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1),
                      timezones=st.sampled_from([UTC, timezone(timedelta(hours=-5))]))


@st.composite
def _rows(draw: st.DrawFn) -> dict[str, Any]:
    """A writer's hashed fields (aware datetimes, Decimal, UUID, plain JSON details)."""
    return _fields(
        draw(st.integers(1, 10**6)), dispute_id=draw(st.uuids()), actor=draw(_text),
        materiality=draw(st.decimals(min_value=0, max_value=10**9, places=2,
                                     allow_nan=False, allow_infinity=False)),
        due_at=draw(_aware), next_due_at=draw(st.none() | _aware),
        decided_at=draw(_aware), external_id=draw(st.none() | _text),
        fence_token=draw(st.none() | st.integers(0, 2**70)), details=draw(_plain_json))


def _stored(fields: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The row as PostgreSQL gives it back to ``audit verify --all``: the instants, UUID and
    amount as their canonical text, ``details`` as ``jsonb`` text (spaced, keys reordered)."""
    text_of = json.loads(canonical_bytes(fields))
    stored = {k: text_of[k] for k in HASHED_FIELDS if k != "details"}
    details = fields["details"]
    if isinstance(details, dict):
        details = dict(sorted(details.items(), key=lambda kv: (len(kv[0]), kv[0])))
    return stored, json.dumps(details, ensure_ascii=False)


@settings(deadline=None, max_examples=examples(40))  # equivalences: tests/unit/property_budget.py
@given(_rows())
def test_a_stored_row_renders_the_writers_bytes_in_either_entry(fields: dict[str, Any]) -> None:
    stored, details_text = _stored(fields)
    details = decode_canonical_json(details_text)
    want = canonical_bytes(fields)
    assert canonical_bytes({**stored, "details": details}) == want
    assert stored_canonical_bytes(dict(stored), details) == want


@settings(deadline=None, max_examples=examples(40))
@given(_plain_json)
def test_a_value_renders_as_canonical_bytes_writes_it_inside_a_row(value: Any) -> None:
    text = canonical_bytes(_fields(details=value)).decode("utf-8")
    assert is_canonical_json(value)
    assert f'"details":{canonical_json(value)},' in text
    if isinstance(value, str):
        assert canonical_string(value) == canonical_json(value)


@pytest.mark.parametrize("text", ['{"a": 1.5}', "[1e3]", '{"x": NaN}', "-Infinity"])
def test_decoding_refuses_what_the_canonical_form_refuses(text: str) -> None:
    with pytest.raises(InvalidInput, match="no canonical form"):
        decode_canonical_json(text)


def test_decoding_keeps_integers_exact_and_refuses_trailing_text() -> None:
    assert decode_canonical_json('{"n": 123456789012345678901234567890}').value == {
        "n": 123456789012345678901234567890}
    with pytest.raises(ValueError, match="Extra data"):
        decode_canonical_json('{"n": 1} x')


def test_values_that_are_not_their_own_canonical_form() -> None:
    for value in (1.5, Decimal("1"), DISPUTE, datetime(2026, 1, 1, tzinfo=UTC), b"x",
                  {1: "a"}, [{"a": 0.5}]):
        assert not is_canonical_json(value)
    assert canonical_json({"due": datetime(2026, 1, 1, tzinfo=UTC)}) == (
        '{"due":"2026-01-01T00:00:00.000000Z"}')
