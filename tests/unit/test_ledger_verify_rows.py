"""The partition walk of ``audit verify --all`` hashes stream rows in their stored form
(``audit_hash.stored_canonical_bytes``, ``details`` decoded by
``audit_hash.decode_canonical_json``): the bytes must be ``canonical_bytes``', and what the
canonical form refuses (a JSON number with a fraction or exponent in ``details``) must still
break the link; the projection facts must be what the SQL scan builds
(``jsonb_strip_nulls``)."""

from __future__ import annotations

import hashlib

import pytest

from escalation.adapters.ledger_verify import (
    _NAMES,
    _facts,
    decoded,
    first_bad_link,
    row_canonical_bytes,
    row_hash_holds,
)
from escalation.domain.audit_hash import (
    GENESIS,
    canonical_bytes,
    decode_canonical_json,
    verify_chain,
)
from escalation.domain.errors import InvalidInput

DETAILS = [
    "{}",
    '{"b": 1, "a": [1, {"z": null, "y": "\\u00e9t\\u00e9"}], "deadlines": [["x", "2026-'
    '12-07T10:00:00+00:00"]]}',
    '{"big": 123456789012345678901234567890, "t": true, "f": false, "n": null}',
    '{"source": "cfpb", "clocks": {"ack": "2026-12-07T10:00:00.000000Z", "gone": null}}',
    '["not", "an", "object"]',
    '"text"',
]


def _row(seq: int, details: str, prev: bytes = GENESIS, row_hash: bytes = b"") -> tuple:
    values = {
        "dispute_id": "0b3c1a52-7d0e-4b5e-9f41-3f7c2d1e0a99", "seq": seq,
        "event": "ENQUEUED", "match_decision": None, "from_tier": None, "to_tier": "first",
        "ladder": "reg_e", "ladder_version": 3, "calendar_version": 2,
        "materiality": "1250.00", "due_at": "2026-12-07T10:00:00.000000Z",
        "next_due_at": None, "regulatory_deadline": "2027-01-06T10:00:00.123456Z",
        "decided_at": "2026-12-06T10:00:00.000000Z", "actor": "svc\u00e9", "trace_id": "t",
        "source_hash": "h", "external_id": None, "fence_token": 2**63 - 1,
        "details": details, "prev_hash": prev, "row_hash": row_hash,
    }
    return tuple(values[n] for n in _NAMES)


@pytest.mark.parametrize("details", DETAILS)
def test_stream_row_bytes_are_the_canonical_bytes(details):
    row = _row(1, details)
    assert row_canonical_bytes(row, decode_canonical_json(details)) == canonical_bytes(
        decoded(row))


def _chain(details: list[str]) -> list[tuple]:
    rows, prev = [], GENESIS
    for seq, text in enumerate(details, start=1):
        draft = _row(seq, text, prev)
        digest = hashlib.sha256(prev + canonical_bytes(decoded(draft))).digest()
        rows.append(_row(seq, text, prev, digest))
        prev = digest
    return rows


def test_first_bad_link_agrees_with_verify_chain():
    rows = _chain(DETAILS[:4])
    assert first_bad_link(rows) is None is verify_chain(decoded(r) for r in rows)
    forged = [*rows[:2], _row(3, DETAILS[0], rows[1][-1], rows[2][-1]), rows[3]]
    assert first_bad_link(forged) == 3 == verify_chain(decoded(r) for r in forged)
    gap = [rows[0], rows[2]]
    assert first_bad_link(gap) == 2 == verify_chain(decoded(r) for r in gap)


@pytest.mark.parametrize("number", ["1.5", "1e3", "-0.0", "NaN", "Infinity"])
def test_a_float_in_details_breaks_the_link_as_canonical_bytes_refuses_it(number):
    text = '{"amount": ' + number + '}'
    with pytest.raises(InvalidInput, match="no canonical form"):
        decode_canonical_json(text)
    assert verify_chain([decoded(_row(1, text))]) == 1
    # whatever hash was stored with it: the link is broken at that row
    anything = hashlib.sha256(GENESIS + text.encode()).digest()
    assert first_bad_link([_row(1, text, GENESIS, anything)]) == 1


def test_an_integer_beyond_64_bits_is_exact():
    """Integers are exact at any magnitude (docs/audit.md, "Canonical bytes"): decoded as
    such, never as a float the canonical form would refuse."""
    text = '{"big": 123456789012345678901234567890}'
    assert decoded(_row(1, text))["details"] == {"big": 123456789012345678901234567890}
    rows = _chain([text])
    assert first_bad_link(rows) is None is verify_chain(decoded(r) for r in rows)


def test_facts_are_what_the_scan_builds():
    row = _row(1, DETAILS[3])
    details = decode_canonical_json(DETAILS[3]).value
    assert _facts(row, details) == {
        "source": "cfpb", "clocks": {"ack": "2026-12-07T10:00:00.000000Z"}}
    assert _facts(row, None) == _facts(row, details)
    assert _facts(_row(1, DETAILS[4]), None) == {}
    assert _facts(_row(1, DETAILS[1]), None) == {
        "deadlines": [["x", "2026-12-07T10:00:00+00:00"]]}


def test_a_row_hashed_on_its_own_holds_exactly_when_the_walk_passes_it():
    """The evidence walk (ADR 0040) hashes each row on its own ``prev_hash``: a sound row
    holds, a row whose hashed field, hash or ``details`` form was changed does not; a forged
    ``prev_hash`` with its hash recomputed holds on its own (the link check refuses it)."""
    rows = _chain(DETAILS[:4])
    assert all(row_hash_holds(r) for r in rows)
    third = list(rows[2])
    third[_NAMES.index("actor")] = "mallory"
    assert not row_hash_holds(tuple(third))
    assert not row_hash_holds((*rows[1][:-1], b"\xcd" * 32))
    assert not row_hash_holds((*rows[1][:-1], None))
    assert not row_hash_holds(_row(1, '{"amount": 1.5}', GENESIS, rows[0][-1]))
    forged = _chain(DETAILS[:1])[0]
    prev = b"\x11" * 32
    digest = hashlib.sha256(prev + canonical_bytes(decoded(forged))).digest()
    relinked = _row(1, DETAILS[0], prev, digest)
    assert row_hash_holds(relinked)
    assert first_bad_link([relinked]) == 1
