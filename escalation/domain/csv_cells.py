"""Spreadsheet formula injection: neutralise CSV cells a spreadsheet would evaluate (pure).

OWASP, *CSV Injection* (https://owasp.org/www-community/attacks/CSV_Injection): a cell that
begins with ``=``, ``+``, ``-``, ``@``, a tab (0x09) or a carriage return (0x0D) may be
interpreted as a formula by Excel, LibreOffice or Google Sheets (``=HYPERLINK(...)``,
``@SUM(...)``, DDE payloads). The guidance is to prefix such a cell with a single quote so it
is shown as text. Writers use RFC 4180 CRLF line ends, so a cell holding a CR or LF is quoted
and a reader does not split it into two rows.

To keep exports re-importable byte for byte, a cell that already begins with ``'`` gets one
more ``'`` too, so :func:`restore_cell` (strip one leading ``'``) inverts :func:`neutralise_cell`
exactly for every string.

A writer made with ``distinct_empty=True`` (the audit export, whose readers must tell an
empty string from NULL: both are hashed, differently) writes the empty string as
:data:`EMPTY_TEXT_CELL`, a lone ``'``, and NULL as an empty cell; :func:`restore_cell` reads
the lone ``'`` back as the empty string, and a text that is itself ``'`` is written ``''``,
so the three stay distinct.

:class:`CsvWriter` is the one CSV writer of the product (``report sla`` and ``report sla
--missed``, ``audit export``, ``audit search --deadlines``, the console's downloads): every
text cell through :func:`neutralise_cell`, RFC 4180 quoting, CRLF line ends, UTF-8 text with
an optional byte order mark (for spreadsheets that guess the encoding without one).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from typing import Protocol

FORMULA_TRIGGERS: tuple[str, ...] = ("=", "+", "-", "@", "\t", "\r")
LINE_END = "\r\n"
"""RFC 4180 line end of every CSV the product writes."""
UTF8_BOM = "\ufeff"
"""The byte order mark written first with ``bom=True`` (UTF-8: EF BB BF)."""
EMPTY_TEXT_CELL = "'"
"""How a ``distinct_empty`` writer writes the empty string (an empty cell is NULL)."""


def neutralise_cell(text: str) -> str:
    """``text`` with a leading ``'`` when it starts with a formula trigger or ``'``."""
    if text.startswith((*FORMULA_TRIGGERS, "'")):
        return "'" + text
    return text


def restore_cell(text: str) -> str:
    """Inverse of :func:`neutralise_cell`: drop one leading ``'``."""
    return text[1:] if text.startswith("'") else text


class TextSink(Protocol):
    """Where a :class:`CsvWriter` writes: anything with ``write(str)`` (a text file, a
    ``StringIO``, a hashing wrapper over a binary file that encodes UTF-8)."""

    def write(self, text: str, /) -> object:
        """Write ``text``."""
        ...


def csv_cell(value: object, *, distinct_empty: bool = False) -> object:
    """One cell as written: None -> empty, text neutralised (:func:`neutralise_cell`),
    numbers (int, Decimal) as they are (their ``str``: a negative amount stays a number,
    it is data the writer typed, not text a spreadsheet could read as a formula). With
    ``distinct_empty`` the empty string is :data:`EMPTY_TEXT_CELL` (module doc)."""
    if value is None:
        return ""
    if distinct_empty and value == "":
        return EMPTY_TEXT_CELL
    if isinstance(value, str):
        return neutralise_cell(value)
    return value


class CsvWriter:
    """The one CSV writer (module doc): ``header`` first, then :meth:`row` per record.

    Args:
        sink: the text destination (:class:`TextSink`); the caller opens and closes it
            (a file opened with ``newline=""`` and ``encoding="utf-8"``, so nothing
            rewrites the CRLF line ends).
        header: the column names (the first line).
        bom: write the UTF-8 byte order mark first.
        distinct_empty: write the empty string as :data:`EMPTY_TEXT_CELL`, so it differs
            from NULL (an empty cell); for files read back as data (the audit export).
    """

    __slots__ = ("_distinct_empty", "_writer")

    def __init__(self, sink: TextSink, header: Sequence[str], *, bom: bool = False,
                 distinct_empty: bool = False) -> None:
        if bom:
            sink.write(UTF8_BOM)
        self._writer = csv.writer(sink, lineterminator=LINE_END)
        self._distinct_empty = distinct_empty
        self.row(header)

    def row(self, cells: Iterable[object]) -> None:
        """Write one record (cells as :func:`csv_cell` writes them)."""
        self._writer.writerow([csv_cell(c, distinct_empty=self._distinct_empty)
                               for c in cells])


def csv_text(header: Sequence[str], rows: Iterable[Iterable[object]], *,
             bom: bool = False) -> str:
    """The whole CSV as text (:class:`CsvWriter` into a string)."""
    buf = io.StringIO(newline="")
    writer = CsvWriter(buf, header, bom=bom)
    for cells in rows:
        writer.row(cells)
    return buf.getvalue()
