"""Source attributes through the CSV import, on the in-memory fakes: the mapping keeps only
the columns it names (each escalation's ENQUEUED row records their cells under
``details.source_attributes``), a kept column the header lacks is an error naming it with
nothing written, and the bounds of ``domain.source_attributes`` are enforced per row (a bad
row names the field and its line) and per mapping."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from escalation.adapters.ladder_files import load_ladder_file
from escalation.domain.calendars import builtin_calendars
from escalation.domain.errors import InvalidInput
from escalation.domain.source_attributes import (
    MAX_NAME_CHARS,
    MAX_SOURCE_ATTRIBUTES,
    MAX_VALUE_CHARS,
    check_source_attributes,
)
from escalation.resources import shipped_ladders_dir
from escalation.service_layer.enqueue import EnqueueRequest, build_one
from escalation.service_layer.importer import (
    ColumnMapping,
    ImportCsv,
    ImportResult,
    ImportTarget,
    import_csv,
)
from tests.fakes import FakeAuditLog, FakeLadders, FakeScheduler

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
LADDER = load_ladder_file(shipped_ladders_dir() / "dispute_review.v1.toml")
HEADER = "Complaint ID,Date sent,Product,Company,State,Consumer narrative\n"
ROWS = ("101,2026-11-20,Mortgage,\"BANK, N.A.\",FL,my name is Jane and my SSN is 123\n"
        "102,2026-11-21,Credit card,<script>alert(1)</script>,,private story\n")


class World:
    def __init__(self) -> None:
        self.scheduler = FakeScheduler(now=NOW)
        self.store = FakeAuditLog()
        self.target = ImportTarget(scheduler=self.scheduler, store=self.store,  # type: ignore[arg-type]
                                   ladders=FakeLadders([LADDER]),
                                   calendars=builtin_calendars(),
                                   default_ladder="dispute_review", actor="import")

    def run(self, text: str, skip_invalid: bool = False, **mapping: Any) -> ImportResult:
        cmap = ColumnMapping(dispute_id="Complaint ID", opened_at="Date sent",
                             default_tier="standard", external_source="cfpb", **mapping)
        return import_csv(ImportCsv(lambda: io.StringIO(text), cmap, skip_invalid=skip_invalid,
                                    processes=1), self.target)

    def kept(self) -> dict[str, Any]:
        """External id -> the ENQUEUED row's source attributes (absent: None)."""
        return {r.external_id: r.details.get("source_attributes")
                for r in self.store.ledger if r.event == "ENQUEUED"}


def test_the_mapping_keeps_only_the_columns_it_names() -> None:
    w = World()
    res = w.run(HEADER + ROWS, keep_columns=("Product", "Company", "State"))
    assert (res.created, res.errors) == (2, [])
    assert w.kept() == {
        "101": {"Product": "Mortgage", "Company": "BANK, N.A.", "State": "FL"},
        # a blank cell is left out; markup is kept as the text it is (the page escapes it)
        "102": {"Product": "Credit card", "Company": "<script>alert(1)</script>"},
    }
    recorded = repr([r.details for r in w.store.ledger])
    assert "narrative" not in recorded and "SSN" not in recorded and "private" not in recorded


def test_nothing_is_kept_unless_named() -> None:
    w = World()
    assert w.run(HEADER + ROWS).created == 2
    assert w.kept() == {"101": None, "102": None}
    assert all("source_attributes" not in r.details for r in w.store.ledger)


def test_a_kept_column_the_header_lacks_is_named_and_nothing_is_written() -> None:
    w = World()
    with pytest.raises(InvalidInput) as got:
        w.run(HEADER + ROWS, keep_columns=("Product", "Sub-product"))
    assert "'Sub-product'" in str(got.value)
    assert w.store.ledger == [] and w.store.states == {} and not w.scheduler.payloads


def test_a_cell_past_the_value_bound_is_a_bad_row_naming_the_field() -> None:
    w = World()
    long_company = "C" * (MAX_VALUE_CHARS + 1)
    text = HEADER + ROWS + f"103,2026-11-22,Mortgage,{long_company},TX,\n"
    res = w.run(text, keep_columns=("Company",))
    assert not res.written and res.created == 0
    (line, message), = res.errors
    assert line == 4 and "source_attributes.Company" in message
    assert f"at most {MAX_VALUE_CHARS}" in message
    assert w.store.ledger == [] and not w.scheduler.payloads
    # with --skip-invalid the good rows are written, with their attributes
    res = w.run(text, skip_invalid=True, keep_columns=("Company",))
    assert res.created == 2 and set(w.kept()) == {"101", "102"}


def test_a_control_character_in_a_kept_cell_is_a_bad_row() -> None:
    w = World()
    res = w.run(HEADER + "104,2026-11-22,Mort\x07gage,B,TX,\n", keep_columns=("Product",))
    (line, message), = res.errors
    assert line == 2 and "Product" in message and "control character" in message
    assert w.store.ledger == []


@pytest.mark.parametrize(("keep", "why"), [
    (("Product", "Product"), "named more than once"),
    (tuple(f"c{i}" for i in range(MAX_SOURCE_ATTRIBUTES + 1)), f"at most {MAX_SOURCE_ATTRIBUTES}"),
    (("x" * (MAX_NAME_CHARS + 1),), "not a usable column name"),
    (("",), "not a usable column name"),
])
def test_a_mapping_past_the_bounds_is_refused_naming_keep_columns(keep: tuple[str, ...],
                                                                  why: str) -> None:
    with pytest.raises(InvalidInput) as got:
        ColumnMapping(dispute_id="id", opened_at="at", keep_columns=keep)
    assert got.value.field == "keep_columns" and why in str(got.value)


def test_a_mapping_file_names_its_kept_columns(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('[columns]\ndispute_id = "Complaint ID"\nopened_at = "Date sent"\n'
                    'keep = ["Product", "State"]\n[defaults]\ntier = "standard"\n')
    assert ColumnMapping.from_file(path).keep_columns == ("Product", "State")
    path.write_text('[columns]\ndispute_id = "Complaint ID"\nkeep = "Product"\n')
    with pytest.raises(InvalidInput, match="keep: a list of column names"):
        ColumnMapping.from_file(path)


def _request(attrs: Any) -> EnqueueRequest:
    return EnqueueRequest(dispute_id="6f1c1a43-94c5-4e6b-9d0e-3f58b0c7a001",
                          materiality="1.00", source_hash="ab", tier="standard",
                          opened_at=NOW, source_attributes=attrs)


@pytest.mark.parametrize(("attrs", "field", "why"), [
    ({f"k{i}": "v" for i in range(MAX_SOURCE_ATTRIBUTES + 1)}, "source_attributes",
     f"at most {MAX_SOURCE_ATTRIBUTES} names"),
    ({"k" * (MAX_NAME_CHARS + 1): "v"}, "source_attributes", f"at most {MAX_NAME_CHARS}"),
    ({"": "v"}, "source_attributes", "non-empty"),
    ({"Product": "v" * (MAX_VALUE_CHARS + 1)}, "source_attributes.Product",
     f"at most {MAX_VALUE_CHARS}"),
    ({"Product": 7}, "source_attributes.Product", "must be text"),
    ({"Pro\nduct": "v"}, "source_attributes", "control character"),
    ({"Product": "a\x00b"}, "source_attributes.Product", "control character"),
])
def test_an_enqueue_past_the_bounds_is_refused_naming_the_field(attrs: Any, field: str,
                                                                 why: str) -> None:
    with pytest.raises(InvalidInput) as got:
        build_one(_request(attrs), LADDER, builtin_calendars(), NOW)
    assert got.value.field == field and why in str(got.value)


def test_the_bounds_themselves_are_accepted() -> None:
    attrs = {f"{i:02d}" + "k" * (MAX_NAME_CHARS - 2): "v" * MAX_VALUE_CHARS
             for i in range(MAX_SOURCE_ATTRIBUTES)}
    assert check_source_attributes(attrs) == attrs
    built = build_one(_request(attrs), LADDER, builtin_calendars(), NOW)
    assert built.details["source_attributes"] == attrs
    assert "source_attributes" not in build_one(_request({}), LADDER, builtin_calendars(),
                                                NOW).details
