"""The CSV import reads each file with one streaming ``csv.reader`` (``importer._parsed``) and
with a comma, semicolon or tab as the field separator."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from escalation.domain.errors import InvalidInput
from escalation.entrypoints.cli_import import _delimiter
from escalation.service_layer.importer import (
    ColumnMapping,
    EnqueueRequest,
    _lines,
    _parsed,
    iter_requests,
)

MAPPING = dict(dispute_id="id", opened_at="opened", materiality="amount",
               source_hash="hash", default_tier="standard")
ROWS = [
    ["id", "opened", "amount", "note", "hash"],
    ["m1", "2026-08-25", "12.50", "plain", "a1"],
    ["m2", "2026-08-26T10:00:00", "0.00", 'a "quoted" note; with, every\tseparator', "b2"],
    ["m3", "2026-08-27", "99.99", "two\nlines", "c3"],
]


def _text(delimiter: str) -> str:
    out = io.StringIO(newline="")
    csv.writer(out, delimiter=delimiter, lineterminator="\r\n").writerows(ROWS)
    return out.getvalue()


def _requests(text: str, **mapping: Any) -> list[tuple[int, EnqueueRequest | str]]:
    return list(iter_requests(io.StringIO(text, newline=""),
                              ColumnMapping(**{**MAPPING, **mapping})))


@pytest.mark.parametrize("delimiter", [";", "\t"])
def test_a_semicolon_or_tab_file_gives_the_requests_of_the_comma_file(delimiter: str) -> None:
    comma = _requests(_text(","))
    other = _requests(_text(delimiter), delimiter=delimiter)
    assert [line for line, _ in comma] == [2, 3, 4]
    assert all(isinstance(r, EnqueueRequest) for _, r in comma)
    assert other == comma  # ids, times, amounts and the mapped source hashes


def test_the_default_source_hash_is_the_hash_of_the_record_as_written() -> None:
    """Without a hash column each row's source hash is the SHA-256 of its own text, so the
    same row written with another separator is another source record."""
    mapping = {**MAPPING, "source_hash": ""}
    comma = _requests(_text(","), **mapping)
    semi = _requests(_text(";"), **mapping, delimiter=";")
    assert [r.external_id for _, r in comma] == [r.external_id for _, r in semi]  # type: ignore[union-attr]
    assert all(a.source_hash != b.source_hash  # type: ignore[union-attr]
               for (_, a), (_, b) in zip(comma, semi, strict=True))


def test_a_semicolon_file_read_as_comma_separated_names_the_delimiter_option() -> None:
    with pytest.raises(InvalidInput, match=r"semicolon-separated.*--delimiter ';'"):
        _requests(_text(";"))
    with pytest.raises(InvalidInput, match=r"tab-separated.*--delimiter tab"):
        _requests(_text("\t"))


@pytest.mark.parametrize("bad", ["|", ",,", "", "x"])
def test_an_unsupported_delimiter_is_refused_naming_the_field(bad: str) -> None:
    with pytest.raises(InvalidInput, match=r"^delimiter: .* use one of"):
        ColumnMapping(**MAPPING, delimiter=bad)


def test_the_cli_flag_spells_a_tab_as_tab() -> None:
    assert _delimiter("tab") == "\t" and _delimiter("TAB") == "\t" and _delimiter("\\t") == "\t"
    assert _delimiter(";") == ";" and _delimiter(None) is None


def test_a_mapping_file_sets_the_delimiter(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('[columns]\ndispute_id = "id"\nopened_at = "opened"\n'
                    '[defaults]\ndelimiter = "\\t"\ntier = "standard"\n')
    assert ColumnMapping.from_file(path).delimiter == "\t"
    assert ColumnMapping.from_file(path, delimiter=";").delimiter == ";"  # the flag wins


def test_one_reader_goes_on_after_a_record_csv_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record ``csv`` refuses (here: a field over the field size limit) is that record's
    error; the reader starts afresh on the next record, lines counted right."""
    text = "id,opened\nm1,2026-08-25\nm2,2026-08-25" + "x" * 80 + "\nm3,2026-08-25\n"
    limit = csv.field_size_limit()
    try:
        csv.field_size_limit(50)
        got = list(_parsed(_lines(io.StringIO(text, newline="")), ","))
    finally:
        csv.field_size_limit(limit)
    assert [(line, count) for line, _, count, _ in got] == [(1, 1), (2, 1), (3, 1), (4, 1)]
    assert got[1][3] == ["m1", "2026-08-25"] and got[3][3] == ["m3", "2026-08-25"]
    assert isinstance(got[2][3], csv.Error) and got[2][1].startswith("m2,")


@settings(deadline=None)
@given(st.sampled_from([",", ";", "\t"]), st.data())
def test_one_streaming_reader_gives_the_rows_of_csv_reading_the_whole_text(
        delimiter: str, data: st.DataObject) -> None:
    text = data.draw(st.text(alphabet=f'a{delimiter}"\n\r', max_size=60))
    try:
        whole = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
    except csv.Error:  # the csv module refuses the text itself: nothing to compare
        assume(False)
    got = list(_parsed(_lines(io.StringIO(text, newline=""), delimiter), delimiter))
    assert [cells for *_, cells in got] == whole
    lines = 0
    for start, _, count, _ in got:
        assert start == lines + 1
        lines += count
