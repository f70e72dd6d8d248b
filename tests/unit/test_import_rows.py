"""Row parsing of the CSV import without servers: the UUID5 of a non-UUID id equals
``uuid.uuid5``'s, cells are found by position as a row dict would find them (the last of
two same-named columns), and only mapped cells are checked for control characters."""

from __future__ import annotations

import io
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from escalation.service_layer.importer import (
    ID_NAMESPACE,
    ColumnMapping,
    _uuid5,
    iter_requests,
    stable_dispute_id,
)


@given(st.text())
def test_uuid5_is_the_standard_librarys(name: str) -> None:
    try:
        expected: uuid.UUID | type[Exception] = uuid.uuid5(ID_NAMESPACE, name)
    except UnicodeEncodeError:  # a lone surrogate: both refuse it
        expected = UnicodeEncodeError
    if expected is UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            _uuid5(name)
    else:
        got = _uuid5(name)
        assert got == expected
        assert str(got) == str(expected)
        assert got.version == 5


def test_a_non_uuid_id_maps_to_the_uuid5_of_source_and_text() -> None:
    did, external = stable_dispute_id(" 7523056 ", "cfpb")
    assert did == uuid.uuid5(ID_NAMESPACE, "cfpb:7523056")
    assert external == "7523056"


MAPPING = ColumnMapping(dispute_id="id", opened_at="opened", default_tier="standard",
                        external_source="t", attribute_columns={"cycle_closing_day": "cycle"})


def _parse(text: str, mapping: ColumnMapping = MAPPING) -> list[tuple[int, object]]:
    return list(iter_requests(io.StringIO(text), mapping, "America/New_York"))


def test_the_last_of_two_same_named_columns_is_read() -> None:
    [(line, req)] = _parse("id,opened,cycle,id\nfirst,2026-01-05,3,second\n")
    assert line == 2
    assert not isinstance(req, str)
    assert req.external_id == "second"
    assert req.attributes == {"cycle_closing_day": "3"}


def test_control_characters_are_refused_in_mapped_cells_only() -> None:
    rows = _parse("id,opened,note\n"
                  "a,2026-01-05,\"free\ttext\"\n"
                  "\"b\tc\",2026-01-05,ok\n",
                  ColumnMapping(dispute_id="id", opened_at="opened", default_tier="standard"))
    assert not isinstance(rows[0][1], str)  # unmapped free text may hold a tab
    assert rows[1][0] == 3
    assert isinstance(rows[1][1], str) and rows[1][1].startswith("id: control character")
