"""``import_csv`` of a semicolon- or tab-separated file writes what the comma-separated file
with the same cells writes, in one process and in two (``import_parallel``: one reader per
chunk), real PostgreSQL and Redis. The rows carry a source hash column, so the writes compare
byte for byte (without one, each row's hash is that of its text as written)."""

from __future__ import annotations

import csv
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from escalation.bootstrap import pass1_helper
from escalation.service_layer import import_parallel
from escalation.service_layer.importer import (
    ColumnMapping,
    ImportCsv,
    ImportResult,
    ImportTarget,
    import_csv,
)
from tests.integration.test_import_two_processes import MAPPING, NOW, _ids, _rows, _written

HASHED = replace(MAPPING, source_hash="hash")


def _write(tmp_path: Path, name: str, rows: list[str], delimiter: str) -> Path:
    """``rows`` (comma-joined cells, none with a comma inside) plus a hash column, written
    with ``delimiter`` (quoting as ``csv`` does: a cell holding the delimiter is quoted)."""
    path = tmp_path / name
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh, delimiter=delimiter, lineterminator="\n")
        out.writerow(["id", "opened", "amount", "tier", "tz", "hash"])
        for i, row in enumerate(rows):
            out.writerow([*row.split(","), f"{i:08x}"])
    return path


def _import(app: Any, path: Path, mapping: ColumnMapping, processes: int) -> ImportResult:
    app.scheduler.time = lambda: NOW
    target = ImportTarget(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                          calendars=app.calendars, default_ladder=app.settings.default_ladder,
                          actor="test-import", warnings=None, helper=pass1_helper(processes))
    return import_csv(ImportCsv(lambda: path.open(newline="", encoding="utf-8"), mapping,
                                processes=processes, batch_size=300), target)


@pytest.mark.parametrize("delimiter", [";", "\t"])
def test_a_semicolon_or_tab_file_writes_what_the_comma_file_writes(
    app: Any, second_app: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    delimiter: str,
) -> None:
    monkeypatch.setattr(import_parallel, "CHUNK", 250)  # five chunks, two in the child
    rows = _rows(f"d{uuid.uuid4().hex[:8]}")
    comma = _import(second_app, _write(tmp_path, "comma.csv", rows, ","), HASHED, processes=1)
    other = _import(app, _write(tmp_path, "other.csv", rows, delimiter),
                    replace(HASHED, delimiter=delimiter), processes=2)
    assert comma.errors == [] and other.errors == []
    assert (other.rows, other.created) == (comma.rows, comma.created) == (1200, 1200)
    ids = _ids(rows)
    want, got = _written(second_app, ids), _written(app, ids)
    assert len(got["ledger"]) == 1200 and got["ledger"] == want["ledger"]
    assert got["state"] == want["state"] and got["payloads"] == want["payloads"]
    assert got["scores"] == want["scores"] and all(got["scores"].values())
    assert app.store.verify() == []


def test_a_bad_record_in_a_semicolon_file_is_its_own_row_error(
    app: Any, tmp_path: Path,
) -> None:
    rows = _rows(f"e{uuid.uuid4().hex[:8]}", n=40)
    path = _write(tmp_path, "semi.csv", rows, ";")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[5] = lines[5].replace(";", ",", 1)  # line 6: one field fewer
    path.write_text("".join(lines), encoding="utf-8")
    res = _import(app, path, replace(HASHED, delimiter=";"), processes=1)
    assert [line for line, _ in res.errors] == [6]
    assert "expected 6 fields, found 5" in res.errors[0][1]
    assert not res.written
