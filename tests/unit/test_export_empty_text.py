"""The CSV audit export keeps the empty string and NULL apart: they hash differently, so a
reader that took an empty cell for NULL could not recompute the row hash of a row holding
``""`` (a ladder chain's ``trace_id``). NULL is an empty cell, ``""`` a lone ``'``; the
offline verifier and ``read_csv`` both read them back as written."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from escalation.domain import audit_hash
from escalation.domain.case_file import verify_export
from escalation.domain.csv_cells import EMPTY_TEXT_CELL, csv_text
from escalation.ports import AuditFilter
from escalation.service_layer.audit_export import COLUMNS, export, read_csv

TEXT_COLUMNS = ("match_decision", "actor", "from_tier", "to_tier", "calendar_version",
                "trace_id", "source_hash", "external_id")
"""Every text column of the ledger but ``event`` and ``ladder`` (checked names)."""
NULLABLE = ("from_tier", "to_tier", "calendar_version", "external_id")
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _chain() -> list[dict[str, Any]]:
    """One dispute's rows: row 1 all text "", row 2 every nullable text NULL, row 3 a text
    that is itself a lone quote (written ``''``)."""
    did: UUID = uuid4()
    rows: list[dict[str, Any]] = []
    prev = audit_hash.GENESIS
    for seq, text in enumerate(("", None, "'"), start=1):
        row: dict[str, Any] = {
            "dispute_id": did, "seq": seq, "event": "ENQUEUED", "match_decision": "X",
            "actor": "svc", "from_tier": "a", "to_tier": "b", "ladder": "dispute_review",
            "ladder_version": 1, "calendar_version": "v1", "materiality": Decimal("1250.00"),
            "due_at": None, "next_due_at": None, "regulatory_deadline": None,
            "decided_at": T0, "recorded_at": T0, "trace_id": "t", "source_hash": "ab",
            "external_id": "E-1", "fence_token": None, "details": {}, "chain_created_at": T0,
        }
        for name in TEXT_COLUMNS:
            if text is not None or name in NULLABLE:
                row[name] = text
        digest = audit_hash.row_hash(prev, row)
        rows.append({**row, "prev_hash": prev, "row_hash": digest})
        prev = digest
    return rows


class _Ledger:
    """The one method of the search port :func:`export` calls."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self._rows = rows

    def stream(self, flt: AuditFilter, columns: Sequence[str]) -> Iterator[dict[str, Any]]:
        return iter(self._rows)


def test_csv_export_keeps_empty_text_and_null_apart(tmp_path: Path) -> None:
    rows = _chain()
    out = tmp_path / "ledger.csv"
    manifest = export(_Ledger(rows), "csv", out, AuditFilter())  # type: ignore[arg-type]
    data = out.read_bytes()
    lines = data.splitlines(keepends=True)
    report = verify_export(manifest.as_dict(), lines, None, None)
    assert not any("does not recompute" in e for e in report.errors), report.errors
    assert report.ok, report.errors
    # row 1: every text column a lone quote; row 2: the nullable ones empty
    first = lines[1].decode().rstrip("\r\n").split(",")
    second = lines[2].decode().rstrip("\r\n").split(",")
    for name in TEXT_COLUMNS:
        assert first[COLUMNS.index(name)] == EMPTY_TEXT_CELL, name
    for name in NULLABLE:
        assert second[COLUMNS.index(name)] == "", name
    assert lines[3].decode().split(",")[COLUMNS.index("actor")] == "''"
    back = list(read_csv(out))
    for name in TEXT_COLUMNS:
        assert back[0][name] == "", name
        assert back[2][name] == "'", name
    for name in NULLABLE:
        assert back[1][name] is None, name
    assert hashlib.sha256(data).hexdigest() == manifest.sha256


def test_other_csv_files_keep_their_empty_cells() -> None:
    # only the audit export marks the empty string: a report's empty cell stays empty
    assert csv_text(["a", "b"], [["", None]]) == "a,b\r\n,\r\n"
