"""Outcomes an import carries (service_layer.import_outcomes) on the in-memory fakes, with
the shipped CFPB ladder and the example mapping's ``[outcomes]`` table: each row's action and
resolution recorded without an instant, asserted timely or late per the source; a re-import
adds nothing; refusals are listed per line, never raised; a bad mapping is refused naming
the key or value."""

from __future__ import annotations

import dataclasses
import tomllib
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from escalation.adapters.ladder_files import LadderCatalog
from escalation.domain.calendars import builtin_calendars
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Status
from escalation.service_layer.import_outcomes import (
    OutcomeMapping,
    OutcomePorts,
    OutcomeRow,
    RecordOutcomes,
    record_outcomes,
)
from tests.fakes import FakeAuditLog, FakeLadders, FakeScheduler, pending, seed

ROOT = Path(__file__).resolve().parents[2]
MAPPING_FILE = ROOT / "docs" / "examples" / "cfpb_ladder_mapping.toml"
MAPPING = OutcomeMapping.from_table(MAPPING_FILE,
                                    tomllib.loads(MAPPING_FILE.read_text())["outcomes"])
CFPB = LadderCatalog.from_dir(ROOT / "ladders").get("cfpb_complaint_response", 4)
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


class World:
    def __init__(self) -> None:
        self.scheduler = FakeScheduler(now=T0)
        self.store = FakeAuditLog()
        self.ports = OutcomePorts(scheduler=self.scheduler, store=self.store,  # type: ignore[arg-type]
                                  ladders=FakeLadders([CFPB]), calendars=builtin_calendars())

    def dispute(self) -> uuid.UUID:
        esc = pending(CFPB, "complaint_analyst", datetime(2026, 3, 20, tzinfo=UTC),
                      entered_tier_at=datetime(2026, 3, 1, tzinfo=UTC))
        return seed(self.store, self.scheduler, esc).dispute_id

    def row(self, line: int, did: uuid.UUID, cell: str, timely: str) -> OutcomeRow:
        step = MAPPING.step(cell)
        assert step is not None
        return (line, did, f"CFPB-{line}", step, MAPPING.timely(timely))

    def run(self, rows: list[OutcomeRow]):  # type: ignore[no-untyped-def]
        return record_outcomes(RecordOutcomes(rows, MAPPING, "importer", len(rows)), self.ports)


def test_an_action_and_a_resolution_are_recorded_without_an_instant() -> None:
    w = World()
    answered, closed = w.dispute(), w.dispute()
    report = w.run([w.row(2, answered, "In progress", "Yes"),
                    w.row(3, closed, "Closed with explanation", "No")])
    assert (report.added, report.on_record, report.not_applied) == (2, 0, [])
    action = w.store.trail(answered)[-1]
    assert (action.event, action.match_decision) == ("ACTION_RECORDED", "ACTION_RESPONSE")
    assert action.details["idempotency_key"] == "import:response"
    assert action.details["asserted"] == {"timely": True, "source": MAPPING.source}
    assert "occurred_at" not in action.details or action.details["occurred_at"] is None
    assert w.store.states[closed].status is Status.RESOLVED
    resolved = w.store.trail(closed)[-1]
    assert resolved.details["outcome"] == "closed_with_explanation"
    assert resolved.details["occurred_at"] is None  # the source gives no instant
    assert resolved.details["asserted"]["timely"] is False
    assert str(closed) not in w.scheduler.payloads  # a resolution leaves Redis


def test_a_re_import_adds_nothing_and_says_what_is_on_record() -> None:
    w = World()
    did = w.dispute()
    rows = [w.row(2, did, "Closed with explanation", "Yes")]
    w.run(rows)
    before = len(w.store.ledger)
    report = w.run(rows)
    assert (report.added, report.on_record) == (0, 1)
    assert len(w.store.ledger) == before


def test_a_refused_row_is_listed_with_its_line_and_the_rest_go_on() -> None:
    w = World()
    good, unknown = w.dispute(), uuid.uuid4()
    report = w.run([w.row(2, unknown, "Closed", "Yes"), w.row(3, good, "Closed", "Yes")])
    assert report.added == 1
    [(line, shown, why)] = report.not_applied
    assert (line, shown) == (2, "CFPB-2") and why.startswith("no escalation recorded")


def test_a_value_the_mapping_does_not_list_names_the_column_and_value() -> None:
    with pytest.raises(InvalidInput, match="Company response to consumer: value 'Maybe'"):
        MAPPING.step("Maybe")
    with pytest.raises(InvalidInput, match="Timely response\\?: value 'Perhaps'"):
        MAPPING.timely("Perhaps")
    assert MAPPING.step("  ") is None and MAPPING.timely("") is None


@pytest.mark.parametrize(("table", "needle"), [
    ({"column": "c", "values": {"x": {}}, "colour": "red"}, "colour: unknown key"),
    ({"values": {"x": {}}}, "column"),
    ({"column": "c"}, "values"),
    ({"column": "c", "values": {"x": {"resolution": "unstated"}}}, "unstated"),
    ({"column": "c", "values": {"x": {}}, "timely_yes": ["Y"], "timely_no": ["Y"]},
     "both timely_yes and timely_no"),
])
def test_a_bad_outcomes_table_is_refused_naming_what_is_wrong(
    table: dict[str, object], needle: str,
) -> None:
    with pytest.raises(InvalidInput, match=needle):
        OutcomeMapping.from_table(Path("m.toml"), table)


class _Recording:
    """A fanout that runs the calls in reverse order (as threads may), recording them."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def map(self, fn: Any, items: Any) -> Any:
        self.items = list(items)
        results = [fn(item) for item in reversed(self.items)]
        return iter(reversed(results))


def test_rows_are_recorded_through_the_fanout_the_edge_gives() -> None:
    w = World()
    fanout = _Recording()
    w.ports = dataclasses.replace(w.ports, fanout=fanout)
    a, b = w.dispute(), w.dispute()
    rows = [w.row(2, a, "In progress", "Yes"), w.row(3, b, "Closed with explanation", "No"),
            w.row(4, uuid.uuid4(), "In progress", "Yes")]
    report = w.run(rows)
    assert fanout.items == rows
    assert (report.added, report.on_record) == (2, 0)
    assert [line for line, _, _ in report.not_applied] == [4]
