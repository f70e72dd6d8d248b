"""The text the PostgreSQL writes send: ``array_literal`` (the array-literal parameters of
the firing path's batched statements) renders what the reference renderer renders, and
``_details_json`` (a ledger row's ``details`` jsonb text) is exactly ``json.dumps``."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from escalation.adapters.audit_store import _details_json, array_literal, reference_array_literal
from tests.unit.property_budget import examples

zones = st.sampled_from([dt.UTC, dt.timezone(dt.timedelta(hours=5, minutes=30)),
                         dt.timezone(dt.timedelta(hours=-8))])
aware = st.datetimes(min_value=dt.datetime(1971, 1, 1), max_value=dt.datetime(2200, 1, 1),
                     timezones=zones)
elements = st.one_of(st.none(), st.uuids(), st.integers(), st.booleans(), aware,
                     st.datetimes(), st.text(), st.sampled_from(['a"b', "a\\b", '"', "\\"]),
                     st.decimals(allow_nan=False, allow_infinity=False))


def _one_kind(kind: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    return st.lists(kind, max_size=6)


@settings(deadline=None, max_examples=examples(30))
@given(st.one_of(_one_kind(elements), _one_kind(st.uuids()), _one_kind(st.integers()),
                 _one_kind(aware), _one_kind(st.none() | aware), _one_kind(st.text()),
                 _one_kind(st.none())))
def test_array_literal_equals_the_reference(values: list[Any]) -> None:
    assert array_literal(values) == reference_array_literal(values)


def test_array_literal_of_firing_columns_equals_the_reference() -> None:
    at = dt.datetime(2026, 12, 1, 13, 38, 36, 291000, tzinfo=dt.UTC)
    for values in ([uuid.uuid4() for _ in range(3)], [1, 2, 30], [at, at], [None, at, None],
                   [None, None], ["senior", "pending"], ["a\"b", "c"], ["a\\b"], [], [""],
                   ["", ""], ['"', ""]):
        assert array_literal(values) == reference_array_literal(values), values


@settings(deadline=None, max_examples=examples(30))
@given(st.dictionaries(st.text(max_size=5), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                   max_size=3),
    max_leaves=6), max_size=4))
def test_details_json_is_the_json_dumps_text(details: dict[str, Any]) -> None:
    got = _details_json(details)
    assert (got.decode() if isinstance(got, bytes) else got) == json.dumps(details)


def test_details_json_refuses_what_json_dumps_refuses() -> None:
    with pytest.raises(TypeError):
        _details_json({"at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)})
