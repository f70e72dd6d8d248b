"""domain.csv_cells: the one CSV writer (formula neutralisation, CRLF, optional BOM)."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest

from escalation.domain.csv_cells import (
    UTF8_BOM,
    CsvWriter,
    csv_cell,
    csv_text,
    neutralise_cell,
    restore_cell,
)

CELLS = ['=HYPERLINK("http://evil.example/","x")', "+1+2", "-2+3", "@SUM(A1:A9)", "\tcmd",
         "\r=1", "'quoted", "plain"]


@pytest.mark.parametrize("cell", CELLS)
def test_every_trigger_is_neutralised_and_restored(cell: str) -> None:
    written = csv_cell(cell)
    assert written == (cell if cell == "plain" else "'" + cell)
    assert restore_cell(neutralise_cell(cell)) == cell


def test_the_writer_neutralises_text_ends_lines_crlf_and_keeps_numbers() -> None:
    text = csv_text(("name", "amount", "note"),
                    [[c, Decimal("-5.00"), None] for c in CELLS] + [["x", -1, "a\nb"]])
    assert text.count("\r\n") == len(CELLS) + 2  # header and rows; "a\nb" stays quoted
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert rows[0] == ["name", "amount", "note"]
    assert [r[0] for r in rows[1:-1]] == [csv_cell(c) for c in CELLS]
    assert not any(r[0].startswith(("=", "+", "-", "@", "\t", "\r")) for r in rows[1:])
    assert {r[1] for r in rows[1:-1]} == {"-5.00"}  # a number the writer typed stays one
    assert rows[-1] == ["x", "-1", "a\nb"]  # a newline inside a cell is quoted
    assert not text.startswith(UTF8_BOM)


def test_the_line_end_is_crlf_outside_cells() -> None:
    text = csv_text(("a",), [["1"], ["2"]])
    assert text == "a\r\n1\r\n2\r\n"


def test_the_byte_order_mark_comes_first_only_when_asked() -> None:
    assert csv_text(("a",), [["=1"]], bom=True) == UTF8_BOM + "a\r\n'=1\r\n"
    buf = io.StringIO(newline="")
    w = CsvWriter(buf, ("a", "b"), bom=True)
    w.row(["@x", None])
    assert buf.getvalue().encode("utf-8") == b"\xef\xbb\xbfa,b\r\n'@x,\r\n"


def test_no_module_but_csv_cells_writes_csv() -> None:
    """The one writer stays the one: a new export path must use ``CsvWriter``."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "escalation"
    writers = re.compile(r"csv\.(writer|DictWriter)\(|lineterminator")
    found = [str(p.relative_to(root)) for p in root.rglob("*.py")
             if writers.search(p.read_text("utf-8"))]
    assert found == ["domain/csv_cells.py"]
