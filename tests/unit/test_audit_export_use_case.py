"""Audit search and export (service_layer.audit_export) over the fakes' ledger: the export
file and its manifest (row count, time range, SHA-256 of the file's bytes), CSV read back as
the ledger holds the rows, formula-looking text neutralised; unknown names and bad paths
refused before anything is written."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from escalation.domain.calendars import SlaWindow, WindowUnit
from escalation.domain.errors import InvalidInput, InvalidParameter
from escalation.domain.ladder import Ladder, Tier
from escalation.ports import AuditFilter
from escalation.service_layer.audit_export import (
    ExportLedger,
    check_filter,
    export,
    export_ledger,
    export_stream,
    manifest_path,
    read_csv,
    search,
)
from tests.fakes import FakeAuditLog, FakeLedgerSearch, FakeScheduler, pending, seed

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
LADDER = Ladder(name="dispute_review", version=1,
                tiers=(Tier("standard", "Standard", 10,
                            SlaWindow(24, WindowUnit.CALENDAR_HOURS)),
                       Tier("senior", "Senior", 20, SlaWindow(48, WindowUnit.CALENDAR_HOURS))),
                terminal_tier="senior")


def _ledger() -> FakeLedgerSearch:
    store, scheduler = FakeAuditLog(), FakeScheduler(now=T0)
    for i in range(3):
        esc = pending(LADDER, "standard", T0 + timedelta(days=1),
                      external_id=f"=HYPERLINK(\"x\",{i})" if i == 0 else f"C-{i}")
        state = seed(store, scheduler, esc, at=T0 + timedelta(hours=i))
        store.append(state, "PROMOTED", "w1", T0 + timedelta(days=1, hours=i), tier="senior")
    return FakeLedgerSearch(store)


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_the_manifest_names_the_rows_their_time_range_and_the_file_hash(
    tmp_path: Path, fmt: str,
) -> None:
    out = tmp_path / f"ledger.{fmt}"
    since, until = T0 + timedelta(hours=1), T0 + timedelta(days=2)
    written: list[int] = []
    cmd = ExportLedger(fmt, out, AuditFilter(since=since, until=until))  # type: ignore[arg-type]
    manifest = export_ledger(cmd, _ledger(), written.append)
    assert manifest.row_count == 5 and written[-1] == 5  # 2 ENQUEUED + 3 PROMOTED
    assert manifest.first_decided_at == since
    assert manifest.last_decided_at == T0 + timedelta(days=1, hours=2)
    assert manifest.sha256 == hashlib.sha256(out.read_bytes()).hexdigest()
    on_disk = json.loads(manifest_path(out).read_text())
    assert on_disk["row_count"] == 5 and on_disk["sha256"] == manifest.sha256
    assert on_disk["time_range"]["from"] == "2026-03-02T13:00:00.000000Z"


def test_a_csv_export_reads_back_as_the_ledger_holds_the_rows(tmp_path: Path) -> None:
    ledger = _ledger()
    out = tmp_path / "ledger.csv"
    export(ledger, "csv", out, AuditFilter())
    back = list(read_csv(out))
    rows = ledger.search(AuditFilter(), 100)
    assert [(r["dispute_id"], r["seq"], r["event"]) for r in back] == [
        (r.dispute_id, r.seq, r.event) for r in rows]
    assert back[0]["external_id"] == "=HYPERLINK(\"x\",0)"  # restored on re-import
    text = out.read_text()
    assert "'=HYPERLINK" in text and ',"=HYPERLINK' not in text  # neutralised in the file
    assert back[0]["details"] == rows[0].details
    assert back[0]["decided_at"] == rows[0].decided_at


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_streamed_export_sends_its_first_row_at_once_and_the_same_bytes(
    tmp_path: Path, fmt: str,
) -> None:
    # the console's download: the header and row 1 first (a download starts when its
    # first row is read, not after a chunk of rows), then 2 rows a chunk; the bytes are
    # export()'s file (whose manifest the console serves)
    ledger = _ledger()  # 6 rows
    chunks = list(export_stream(ledger, fmt, AuditFilter(), rows_per_chunk=2))  # type: ignore[arg-type]
    lines = [c.decode().count("\n") for c in chunks]
    assert lines == ([2, 2, 2, 1] if fmt == "csv" else [1, 2, 2, 1])
    out = tmp_path / f"ledger.{fmt}"
    export(ledger, fmt, out, AuditFilter())  # type: ignore[arg-type]
    assert b"".join(chunks) == out.read_bytes()


def test_an_export_to_a_missing_directory_or_in_an_unknown_format_writes_nothing(
    tmp_path: Path,
) -> None:
    with pytest.raises(InvalidInput, match="does not exist"):
        export(_ledger(), "csv", tmp_path / "nope" / "x.csv", AuditFilter())
    with pytest.raises(InvalidInput, match="format"):
        export(_ledger(), "xml", tmp_path / "x.xml", AuditFilter())  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_unknown_decision_or_tier_names_are_refused_listing_the_known_ones() -> None:
    ledger = _ledger()
    check_filter(ledger, AuditFilter(decision="PROMOTED_TO_SENIOR", tier="senior"), [LADDER])
    with pytest.raises(InvalidInput, match=r"unknown decision/event 'PROMOTD'.*PROMOTED"):
        check_filter(ledger, AuditFilter(decision="PROMOTD"), [LADDER])
    with pytest.raises(InvalidInput, match=r"unknown tier 'seniro'.*senior, standard"):
        check_filter(ledger, AuditFilter(tier="seniro"), [LADDER])


def test_search_filters_and_bounds_its_limit() -> None:
    ledger = _ledger()
    assert {r.event for r in search(ledger, AuditFilter(decision="PROMOTED"))} == {"PROMOTED"}
    assert len(search(ledger, AuditFilter(), limit=2)) == 2
    with pytest.raises(InvalidParameter) as caught:
        search(ledger, AuditFilter(), limit=10_001)
    assert caught.value.params == ("limit",)
