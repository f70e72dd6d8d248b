"""Source attributes through the CSV import on real PostgreSQL and Redis: the kept columns'
cells land in each dispute's ENQUEUED ledger row (``details.source_attributes``), under its
row hash (the chain verifies; an edited value breaks it), byte for byte the same on the bulk
path (row templates, one and two processes) and the general path; the columns not kept are
nowhere in the ledger."""

from __future__ import annotations

import csv
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from escalation.bootstrap import pass1_helper
from escalation.domain.audit_hash import verify_chain
from escalation.domain.errors import InvalidInput
from escalation.service_layer.importer import (
    SHAPE_SAMPLE,
    ColumnMapping,
    ImportCsv,
    ImportResult,
    ImportTarget,
    import_csv,
)

PRODUCTS = ("Mortgage", "Credit card", "Checking or savings account")
COMPANIES = ('EQUIFAX, INC.', 'Bank "B" \\ Co', "Société Générale")


def _write(path: Path, prefix: str, rows: int) -> dict[str, dict[str, str]]:
    """A CFPB-shaped file (a few opening days: shapes repeat); returns what each row keeps."""
    want: dict[str, dict[str, str]] = {}
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["Complaint ID", "Date sent to company", "Product", "Company", "State",
                      "Consumer complaint narrative"])
        for i in range(rows):
            ext = f"{prefix}{i}"
            state = "" if i % 5 == 0 else "FL"
            product, company = PRODUCTS[i % 3], COMPANIES[i % len(COMPANIES)]
            out.writerow([ext, f"2026-11-{10 + i % 4:02d}", product, company, state,
                          f"private narrative {i}"])
            want[ext] = {"Product": product, "Company": company,
                         **({"State": state} if state else {})}
    return want


def _import(app: Any, path: Path, **kw: Any) -> ImportResult:
    mapping = ColumnMapping(dispute_id="Complaint ID", opened_at="Date sent to company",
                            default_tier="standard", external_source="cfpb",
                            keep_columns=("Product", "Company", "State"))
    target = ImportTarget(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                          calendars=app.calendars, default_ladder="dispute_review",
                          actor="import", helper=pass1_helper(kw.get("processes")))
    return import_csv(ImportCsv(lambda: path.open(newline="", encoding="utf-8"), mapping,
                                batch_size=400, **kw), target)


def _ledger(app: Any, prefix: str) -> dict[str, list[dict[str, Any]]]:
    """External id -> its chain's rows (every column), for the disputes of ``prefix``."""
    with app.engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT a.* FROM escalation_audit a JOIN escalation_state s USING (dispute_id) "
            "WHERE s.external_id LIKE :p ORDER BY a.dispute_id, a.seq"),
            {"p": prefix + "%"}).mappings().all()
    chains: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        chains.setdefault(r["external_id"], []).append(dict(r))
    return chains


@pytest.mark.parametrize(("bulk", "processes", "rows"), [
    (True, 1, 60), (True, 2, SHAPE_SAMPLE + 200), (False, 1, 60)])
def test_kept_columns_are_recorded_under_the_enqueued_row_hash(
    app: Any, tmp_path: Path, bulk: bool, processes: int, rows: int,
) -> None:
    prefix = f"SA{int(bulk)}{processes}-{uuid.uuid4().hex[:6]}-"
    want = _write(tmp_path / "in.csv", prefix, rows)
    res = _import(app, tmp_path / "in.csv", bulk=bulk, processes=processes)
    assert (res.created, res.errors) == (rows, [])
    chains = _ledger(app, prefix)
    assert len(chains) == rows
    for ext, chain in chains.items():
        (row,) = chain
        assert row["event"] == "ENQUEUED"
        assert row["details"]["source_attributes"] == want[ext]
        assert verify_chain(chain) is None  # the attributes are under the row hash
    assert "private narrative" not in json.dumps([c[0]["details"] for c in chains.values()])
    # an edited attribute breaks the chain: they are evidence, not a label
    ext, chain = next(iter(chains.items()))
    forged = {**chain[0], "details": {**chain[0]["details"],
                                      "source_attributes": {**want[ext], "Product": "x"}}}
    assert verify_chain([forged]) == 1


def test_the_bulk_and_general_paths_record_the_same_details(
    app: Any, second_app: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same file into two databases, one per path, at one decision instant: equal
    ENQUEUED details (the row hashes differ only by each row's own trace id)."""
    now = app.scheduler.time()
    for a in (app, second_app):
        monkeypatch.setattr(a.scheduler, "time", lambda: now)
    prefix = f"SAeq-{uuid.uuid4().hex[:6]}-"
    path = tmp_path / "in.csv"
    _write(path, prefix, 40)
    assert _import(app, path, bulk=True, processes=1).created == 40
    assert _import(second_app, path, bulk=False).created == 40
    fast, general = _ledger(app, prefix), _ledger(second_app, prefix)
    assert fast.keys() == general.keys()
    for ext in fast:
        a, b = fast[ext][0], general[ext][0]
        assert a["details"] == b["details"]
        assert a["details"]["source_attributes"]


def test_an_unknown_kept_column_writes_nothing(app: Any, tmp_path: Path) -> None:
    prefix = f"SAno-{uuid.uuid4().hex[:6]}-"
    path = tmp_path / "in.csv"
    path.write_text("Complaint ID,Date sent to company,Product\n"
                    f"{prefix}1,2026-11-10,Mortgage\n", encoding="utf-8")
    with pytest.raises(InvalidInput, match="'Company'"):
        _import(app, path)
    assert _ledger(app, prefix) == {}
