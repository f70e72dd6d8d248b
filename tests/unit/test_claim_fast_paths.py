"""The firing path's cheaper encodings give what the general ones give.

* ``claimed_payload_to_escalation`` (the claim's trusted decode of a flat HGETALL reply) equals
  ``payload_to_escalation`` on every payload this code writes, on payloads of the earlier
  long-name format, and refuses (InvalidInput) exactly what the general decode refuses;
* ``_json_lists`` (apply.lua's pair lists of a call in one array, orjson) decodes to the
  lists, and falls back to the ASCII-escaping encoder per list for what orjson refuses.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from json.encoder import encode_basestring_ascii

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from escalation.adapters.redis_scheduler import (
    _json_lists,
    claimed_payload_to_escalation,
    escalation_to_payload,
    payload_to_escalation,
)
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation
from escalation.domain.materiality import Materiality
from tests.unit.property_budget import examples
from tests.unit.test_redis_payload import bare_esc, full_esc, long_name_payload

T0 = datetime(2026, 3, 2, 9, 0, 0, 123000, tzinfo=UTC)


def flat(fields: dict[str, str]) -> list[str]:
    """A HGETALL reply as claim.lua returns it: ``[f1, v1, ...]``."""
    out: list[str] = []
    for kv in fields.items():
        out += kv
    return out


def both(member: str, fields: dict[str, str]) -> tuple[object, object]:
    """(trusted decode, general decode) of one payload; an InvalidInput stands for itself."""
    results: list[object] = []
    for decode in (lambda: claimed_payload_to_escalation(member, flat(fields)),
                   lambda: payload_to_escalation(member, fields)):
        try:
            results.append(decode())
        except InvalidInput:
            results.append(InvalidInput)
    return results[0], results[1]


@pytest.mark.parametrize("make", [full_esc, bare_esc])
def test_trusted_decode_equals_the_general_one(make: object) -> None:
    esc = make()  # type: ignore[operator]
    fields = escalation_to_payload(esc)
    got = claimed_payload_to_escalation(str(esc.dispute_id), flat(fields))
    assert got == payload_to_escalation(str(esc.dispute_id), fields) == esc


@pytest.mark.parametrize("make", [full_esc, bare_esc])
def test_trusted_decode_reads_the_long_name_format(make: object) -> None:
    esc = make()  # type: ignore[operator]
    fields = long_name_payload(esc)
    assert claimed_payload_to_escalation(str(esc.dispute_id), flat(fields)) == esc


@pytest.mark.parametrize("field,value", [
    ("m", "1e3"), ("m", "12.5"), ("m", "-1.00"), ("m", "1_000.00"), ("m", "1" * 16 + ".00"),
    ("m", "\u0661\u0662.00"), ("seq", "\u0663"), ("seq", "x"), ("due_ms", "12.5"),
    ("e", "\u00b2"), ("l", "default"), ("l", "default@x"), ("l", "@1"), ("d", "soon"),
    ("ds", "a=1,b"), ("seq", ""),
])
def test_trusted_decode_refuses_what_the_general_one_refuses(field: str, value: str) -> None:
    esc = full_esc()
    fields = {**escalation_to_payload(esc), field: value}
    fast, general = both(str(esc.dispute_id), fields)
    assert fast == general


def test_trusted_decode_of_a_payload_missing_a_field_or_odd_reply() -> None:
    esc = bare_esc()
    fields = escalation_to_payload(esc)
    del fields["h"]
    assert both(str(esc.dispute_id), fields) == (InvalidInput, InvalidInput)
    with pytest.raises(InvalidInput):
        claimed_payload_to_escalation(str(esc.dispute_id), [*flat(escalation_to_payload(esc))[:-1]])


def test_trusted_decode_ignores_nothing_an_unknown_field_changes() -> None:
    """An unknown field sends the payload through the general decode (same result)."""
    esc = bare_esc()
    fields = {**escalation_to_payload(esc), "zz": "1"}
    fast, general = both(str(esc.dispute_id), fields)
    assert fast == general


_text = st.text(min_size=1, max_size=12).filter(lambda s: "@" not in s)


@settings(deadline=None, max_examples=examples(30))
@given(tier=_text, ladder=_text, seq=st.integers(0, 10**9), cents=st.integers(0, 10**17 - 1),
       due=st.integers(0, 2**41), entered=st.integers(0, 2**41), trace=_text,
       external=st.none() | _text, tz=st.none() | _text)
def test_trusted_decode_equals_general_on_generated_payloads(
    tier: str, ladder: str, seq: int, cents: int, due: int, entered: int, trace: str,
    external: str | None, tz: str | None,
) -> None:
    esc = Escalation(
        dispute_id=uuid.uuid4(), tier=tier, due_at=T0 + timedelta(milliseconds=due % 10**12),
        materiality=Materiality(Decimal(cents).scaleb(-2)), source_hash="ab", ladder=ladder,
        ladder_version=seq % 7 + 1, seq=seq, entered_tier_at=T0 + timedelta(milliseconds=entered
                                                                            % 10**12),
        trace_id=trace, external_id=external, institution_tz=tz)
    fields = escalation_to_payload(esc)
    assert claimed_payload_to_escalation(str(esc.dispute_id), flat(fields)) == esc


def _ascii_pairs(mapping: dict[str, str]) -> str:
    return "[" + ", ".join(encode_basestring_ascii(k) + ", " + encode_basestring_ascii(v)
                           for k, v in mapping.items()) + "]"


@settings(deadline=None, max_examples=examples(30))
@given(st.lists(st.lists(st.text(max_size=12), max_size=6), max_size=6))
def test_json_lists_decode_to_the_lists(lists: list[list[str]]) -> None:
    assert json.loads(_json_lists(lists)) == lists


def test_json_lists_falls_back_per_list_for_a_lone_surrogate() -> None:
    lists = [["t", "x"], ["r", "a\ud800b"], []]
    got = _json_lists(lists)
    assert isinstance(got, str)
    assert got == '[["t","x"],' + _ascii_pairs({"r": "a\ud800b"}) + ",[]]"


def test_json_lists_writes_utf8_not_escapes() -> None:
    """Redis stores the same bytes either way (cjson turns escapes into UTF-8); orjson
    sends them as they are."""
    got = _json_lists([["r", "caf\u00e9 \U0001f600"]])
    assert isinstance(got, bytes)
    assert got == '[["r","caf\u00e9 \U0001f600"]]'.encode()


@pytest.mark.parametrize("make", [full_esc, bare_esc])
def test_payload_pairs_is_the_payload_flattened(make: object) -> None:
    from escalation.adapters.redis_scheduler import payload_pairs

    esc = make()  # type: ignore[operator]
    assert payload_pairs(esc) == flat(escalation_to_payload(esc))


@settings(deadline=None)
@given(seq=st.integers(0, 10**9), ms=st.integers(0, 2**40))
def test_encode_op_sends_the_payload_seq_and_due_ms(seq: int, ms: int) -> None:
    from escalation.adapters.redis_scheduler import RedisScheduler
    from escalation.ports import ApplyAction, ApplyOp

    esc = full_esc().with_changes(seq=seq, due_at=T0 + timedelta(milliseconds=ms))
    scalars, pairs, notify = RedisScheduler._encode_op(
        ApplyOp(esc, ApplyAction.RESCHEDULE, 7, {"a": "b"}), True)
    fields = escalation_to_payload(esc)
    assert scalars == [str(esc.dispute_id), "reschedule", "7", fields["seq"], fields["due_ms"],
                       "1"]
    assert pairs == flat(fields) and notify == ["a", "b"]
