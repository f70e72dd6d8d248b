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
"""

from __future__ import annotations

FORMULA_TRIGGERS: tuple[str, ...] = ("=", "+", "-", "@", "\t", "\r")


def neutralise_cell(text: str) -> str:
    """``text`` with a leading ``'`` when it starts with a formula trigger or ``'``."""
    if text.startswith((*FORMULA_TRIGGERS, "'")):
        return "'" + text
    return text


def restore_cell(text: str) -> str:
    """Inverse of :func:`neutralise_cell`: drop one leading ``'``."""
    return text[1:] if text.startswith("'") else text
