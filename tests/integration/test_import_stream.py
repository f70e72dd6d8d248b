"""``import_csv``: two streaming passes; every bad row is reported before anything is written."""

from __future__ import annotations

import io
import uuid
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

import pytest

from escalation.service_layer.importer import (
    ColumnMapping,
    ImportCsv,
    ImportTarget,
    import_csv,
)

MAPPING = ColumnMapping(dispute_id="id", opened_at="opened", materiality="amount",
                        default_tier="standard")


def _csv(tmp_path: Path, rows: list[tuple[str, str, str]]) -> Path:
    path = tmp_path / "disputes.csv"
    lines = ["id,opened,amount"] + [",".join(r) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _target(app: Any) -> ImportTarget:
    return ImportTarget(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                        calendars=app.calendars, default_ladder=app.settings.default_ladder,
                        actor="test-import")


class _Opener:
    """Opens the file afresh each time and counts the opens (one per import)."""

    def __init__(self, path: Path) -> None:
        self.path, self.opens = path, 0

    def __call__(self) -> TextIO:
        self.opens += 1
        return io.open(self.path, newline="", encoding="utf-8")  # noqa: UP020


def test_bad_rows_are_all_reported_with_line_numbers_and_nothing_is_written(
    app: Any, tmp_path: Path
) -> None:
    ids = [str(uuid.uuid4()) for _ in range(8)]
    opened = "2026-11-30T10:00:00+00:00"
    rows = [(ids[0], opened, "10.00"), (ids[1], opened, "20.00"),
            (ids[2], opened, "0.125"),          # line 4: sub-cent money
            (ids[3], opened, "30.00"), (ids[4], opened, "1e3"),  # line 6: not plain decimal
            (ids[5], "yesterday", "5.00"),      # line 7: bad time
            (ids[6], opened, "7.00"), (ids[1], opened, "8.00"),  # line 9: duplicate of line 3
            (ids[7], opened, "9.00")]
    calls: list[tuple[str, int, int | None]] = []
    opener = _Opener(_csv(tmp_path, rows))
    res = import_csv(ImportCsv(opener, MAPPING), _target(app),
                     progress=lambda *c: calls.append(c))
    assert not res.written and res.rows == 9
    assert [line for line, _ in res.errors] == [4, 6, 7, 9]
    assert "below a cent" in res.errors[0][1] and "already on line 3" in res.errors[3][1]
    assert opener.opens == 1  # the write pass never started
    assert {c[0] for c in calls} == {"validate"}
    assert all(app.store.get(uuid.UUID(i)) is None for i in ids)

    calls.clear()
    opener = _Opener(opener.path)
    res = import_csv(ImportCsv(opener, MAPPING, skip_invalid=True, batch_size=2),
                     _target(app), progress=lambda *c: calls.append(c))
    assert res.written and res.created == 5 and res.existing == 0
    assert opener.opens == 1  # read once: the write pass takes the built rows from the spill
    writes = [c for c in calls if c[0] == "write"]
    assert writes[-1] == ("write", 5, 5) and len(writes) >= 3  # batches of 2
    good = [ids[0], ids[1], ids[3], ids[6], ids[7]]
    assert all(app.store.get(uuid.UUID(i)) is not None for i in good)
    assert app.store.get(uuid.UUID(ids[2])) is None


def test_reimporting_the_same_file_creates_nothing(app: Any, tmp_path: Path) -> None:
    rows = [(str(uuid.uuid4()), "2026-11-30", "1.50") for _ in range(7)]
    path = _csv(tmp_path, rows)
    first = import_csv(ImportCsv(_Opener(path), MAPPING, batch_size=3), _target(app))
    again = import_csv(ImportCsv(_Opener(path), MAPPING, batch_size=3), _target(app))
    assert (first.created, first.existing) == (7, 0)
    assert (again.created, again.existing) == (0, 7)


BLANK = ("materiality: empty cell in column 'amount'; set default_materiality in the "
         "mapping to import blanks as that amount")


def _nothing_written(app: Any, did: str) -> bool:
    """Neither a PostgreSQL projection row nor a Redis pending entry or payload for ``did``."""
    parsed = uuid.UUID(did)
    keys = app.scheduler.keys_for(parsed)
    return (app.store.get(parsed) is None and app.scheduler.payload(parsed) is None
            and app.redis.zscore(keys.pending, did) is None)


@pytest.mark.parametrize("bulk", [True, False])
def test_a_blank_amount_cell_is_refused_unless_the_mapping_sets_a_default(
    app: Any, tmp_path: Path, bulk: bool
) -> None:
    ids = [str(uuid.uuid4()) for _ in range(6)]
    opened = "2026-11-30T10:00:00+00:00"  # one shape per amount: the bulk path's templates
    amounts = ["10.00", "", "10.00", '"  "', "10.00", "10.00"]  # lines 3 and 5 blank
    path = _csv(tmp_path, [(did, opened, amount) for did, amount in zip(ids, amounts,
                                                                         strict=True)])
    res = import_csv(ImportCsv(_Opener(path), MAPPING, bulk=bulk), _target(app))
    assert not res.written and res.created == 0
    assert res.errors == [(3, BLANK), (5, BLANK)]
    assert all(_nothing_written(app, did) for did in ids)

    res = import_csv(ImportCsv(_Opener(path), MAPPING, bulk=bulk, skip_invalid=True),
                     _target(app))
    assert res.written and res.errors == [(3, BLANK), (5, BLANK)]
    assert (res.created, res.existing) == (4, 0)
    assert _nothing_written(app, ids[1]) and _nothing_written(app, ids[3])
    for did in (ids[0], ids[2], ids[4], ids[5]):
        got = app.store.get(uuid.UUID(did))
        assert got is not None and got[0].materiality.amount == Decimal("10.00")
        assert app.scheduler.payload(uuid.UUID(did)) is not None

    # An explicit default is the amount of the blank cells (the rest stay as imported).
    explicit = replace(MAPPING, default_materiality="40.00")
    res = import_csv(ImportCsv(_Opener(path), explicit, bulk=bulk), _target(app))
    assert res.written and res.errors == [] and (res.created, res.existing) == (2, 4)
    for did in (ids[1], ids[3]):
        got = app.store.get(uuid.UUID(did))
        assert got is not None and got[0].materiality.amount == Decimal("40.00")
        assert app.scheduler.payload(uuid.UUID(did)) is not None


def test_without_an_amount_column_every_row_is_imported_at_zero(
    app: Any, tmp_path: Path
) -> None:
    ids = [str(uuid.uuid4()) for _ in range(3)]
    path = _csv(tmp_path, [(did, "2026-11-30", "") for did in ids])
    unmapped = replace(MAPPING, materiality="")  # the "amount" column is not read
    res = import_csv(ImportCsv(_Opener(path), unmapped), _target(app))
    assert res.written and res.errors == [] and res.created == 3
    for did in ids:
        got = app.store.get(uuid.UUID(did))
        assert got is not None and got[0].materiality.amount == Decimal("0.00")
