"""Row parsing of the CSV import without servers: the UUID5 of a non-UUID id equals
``uuid.uuid5``'s, cells are found by position as a row dict would find them (the last of
two same-named columns), and only mapped cells are checked for control characters."""

from __future__ import annotations

import csv
import dataclasses
import io
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from escalation.domain.errors import InvalidInput
from escalation.service_layer import importer
from escalation.service_layer.importer import (
    ID_NAMESPACE,
    ColumnMapping,
    _lines,
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


def test_a_mapped_column_named_twice_in_the_header_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"more than once: 'id' \(columns 1, 4\)"):
        _parse("id,opened,cycle,id\nfirst,2026-01-05,3,second\n")
    # an unmapped column named twice is harmless
    [(line, req)] = _parse("id,opened,cycle,x,x\nfirst,2026-01-05,3,a,b\n")
    assert not isinstance(req, str) and req.external_id == "first"
    assert req.attributes == {"cycle_closing_day": "3"}


def test_a_missing_column_is_named_with_the_header_and_a_close_match() -> None:
    with pytest.raises(InvalidInput, match=r"'opened' \(did you mean 'opened '\?\).*has 3 "):
        _parse("id,opened ,cycle\nfirst,2026-01-05,3\n")


def test_bytes_that_are_not_utf8_fail_their_row_only() -> None:
    raw = b"id,opened,note\na,2026-01-05,caf\xe9\nb,2026-01-05,ok\n"
    text = io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8", errors="surrogateescape",
                            newline="")
    rows = list(iter_requests(text, ColumnMapping(dispute_id="id", opened_at="opened",
                                                  default_tier="standard"),
                              "America/New_York"))
    assert rows[0][0] == 2 and rows[0][1] == ("not valid UTF-8: byte 0xe9 at character 17 "
                                             "of the record (save the file as UTF-8)")
    assert not isinstance(rows[1][1], str)


def test_control_characters_are_refused_in_mapped_cells_only() -> None:
    rows = _parse("id,opened,note\n"
                  "a,2026-01-05,\"free\ttext\"\n"
                  "\"b\tc\",2026-01-05,ok\n",
                  ColumnMapping(dispute_id="id", opened_at="opened", default_tier="standard"))
    assert not isinstance(rows[0][1], str)  # unmapped free text may hold a tab
    assert rows[1][0] == 3
    assert isinstance(rows[1][1], str) and rows[1][1].startswith("id: control character")


@settings(deadline=None)
@given(st.text(alphabet='a,"\n\r', max_size=60))
def test_records_split_where_the_csv_module_splits_them(text: str) -> None:
    """Each record ``_lines`` yields is exactly one row of Python's ``csv`` reading the
    whole text (a stray quote swallows only what ``csv`` itself would swallow)."""
    try:
        whole = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error:  # the csv module refuses the text itself: nothing to compare
        assume(False)
    split = []
    lines = 0
    for start, raw, count in _lines(io.StringIO(text, newline="")):
        assert start == lines + 1
        lines += count
        rows = list(csv.reader(io.StringIO(raw)))
        assert len(rows) <= 1, (raw, rows)
        split += rows
    assert split == whole


def test_a_stray_quote_swallows_one_line_not_the_rest_of_the_file() -> None:
    text = ("id,opened,note\n"
            "m1,2023-08-25,ok\n"
            'm2,2023-08-25,"oops\n'
            'm3,2023-08-25,"fine, really"\n'
            "m4,2023-08-25,ok\n"
            "m5,2023-08-25,ok\n")
    rows = _parse(text, ColumnMapping(dispute_id="id", opened_at="opened",
                                      default_tier="standard"))
    assert [line for line, _ in rows] == [2, 3, 5, 6]
    bad = rows[1][1]
    assert isinstance(bad, str) and "the record spans lines 3-4" in bad
    assert [r.external_id for _, r in rows if not isinstance(r, str)] == ["m1", "m4", "m5"]


def test_an_unclosed_quote_ends_its_record_at_the_size_cap(monkeypatch: Any) -> None:
    monkeypatch.setattr(importer, "MAX_RECORD_CHARS", 100)
    text = 'id,opened,note\nm1,2023-08-25,"never closed\n' + "m2,2023-08-25,ok\n" * 20
    records = list(_lines(io.StringIO(text)))
    assert records[1][0] == 2 and records[1][2] > 1  # the bad record spans several lines
    assert sum(r[2] for r in records) == 22  # every line is in exactly one record
    assert len(records) > 3  # the lines after the cap are records of their own


EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
MONEY = ColumnMapping(dispute_id="id", opened_at="opened", materiality="amount",
                      default_tier="standard")
BLANK = ("materiality: empty cell in column 'amount'; set default_materiality in the "
         "mapping to import blanks as that amount")


def test_a_blank_or_whitespace_cell_in_a_mapped_materiality_column_is_a_bad_row() -> None:
    rows = _parse("id,opened,amount\na,2026-01-05,12.50\nb,2026-01-05,\n"
                  'c,2026-01-05,"   "\nd,2026-01-05,0.00\n', MONEY)
    assert [(line, item) for line, item in rows if isinstance(item, str)] == [
        (3, BLANK), (4, BLANK)]
    assert [r.materiality for _, r in rows if not isinstance(r, str)] == ["12.50", "0.00"]


@pytest.mark.parametrize("default", ["0.00", "75.00"])
def test_an_explicit_default_materiality_is_the_amount_of_blank_cells(default: str) -> None:
    mapping = dataclasses.replace(MONEY, default_materiality=default)
    rows = _parse("id,opened,amount\na,2026-01-05,12.50\nb,2026-01-05,\nc,2026-01-05, \n",
                  mapping)
    assert [r.materiality for _, r in rows if not isinstance(r, str)] == [
        "12.50", default, default]


def test_without_a_materiality_column_every_row_takes_the_default_or_zero() -> None:
    text = "id,opened,amount\na,2026-01-05,\nb,2026-01-05,99.00\n"  # "amount" is not mapped
    rows = _parse(text, ColumnMapping(dispute_id="id", opened_at="opened",
                                      default_tier="standard"))
    assert [r.materiality for _, r in rows if not isinstance(r, str)] == ["0.00", "0.00"]
    rows = _parse(text, ColumnMapping(dispute_id="id", opened_at="opened",
                                      default_tier="standard", default_materiality="5.00"))
    assert [r.materiality for _, r in rows if not isinstance(r, str)] == ["5.00", "5.00"]


def test_a_mapping_file_default_counts_as_explicit_and_the_shipped_mappings_still_load(
    tmp_path: Path
) -> None:
    mapping = tmp_path / "m.toml"
    mapping.write_text('[columns]\ndispute_id = "id"\nopened_at = "opened"\n'
                       'materiality = "amount"\n[defaults]\ntier = "standard"\n')
    assert ColumnMapping.from_file(mapping).default_materiality is None
    rows = _parse("id,opened,amount\na,2026-01-05,\n", ColumnMapping.from_file(mapping))
    assert rows == [(2, BLANK)]
    assert ColumnMapping.from_file(mapping, default_materiality="1.00").default_materiality \
        == "1.00"  # the CLI flag
    with mapping.open("a") as fh:
        fh.write('materiality = "0.00"\n')
    rows = _parse("id,opened,amount\na,2026-01-05,\n", ColumnMapping.from_file(mapping))
    assert [r.materiality for _, r in rows if not isinstance(r, str)] == ["0.00"]
    # The shipped mappings (files without amounts) map no materiality column: every row
    # gets their default, as before.
    shipped = sorted(EXAMPLES.glob("*mapping*.toml"))
    assert shipped
    for path in shipped:
        m = ColumnMapping.from_file(path)
        assert not m.materiality and m.default_materiality == "0.00", path
        header = ",".join(m.columns())  # the ladder mapping's outcome columns too
        blanks = "," * (len(m.columns()) - 2)  # a blank outcome cell states none
        rows = _parse(f"{header}\nx1,2026-01-05{blanks}\n", m)
        assert [r.materiality for _, r in rows if not isinstance(r, str)] == ["0.00"], path
