"""Canonical serialization and hash chain of the audit ledger (pure, no database)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest

from escalation.domain.audit_hash import (
    GENESIS,
    HASHED_FIELDS,
    canonical_bytes,
    row_hash,
    verify_chain,
)
from escalation.domain.errors import InvalidInput

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
