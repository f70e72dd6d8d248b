"""Export: CSV round-trips (re-import reproduces the rows and the manifest hash), JSONL
carries the same values, timestamps are UTC ISO-8601, money strings; memory is flat in N."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import tracemalloc
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from escalation.adapters.audit_search import PostgresLedgerSearch
from escalation.adapters.audit_store import PostgresAuditStore
from escalation.domain.audit_hash import verify_chain
from escalation.service_layer.audit_export import (
    COLUMNS,
    AuditFilter,
    export,
    manifest_path,
    read_csv,
    search,
    write_csv,
)
from tests.integration.audit_support import T0, claimed, make_escalation, promote


def _chains(engine: sa.Engine, n: int) -> None:
    store = PostgresAuditStore(engine)
    for _ in range(n):
        esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
        store.record_decisions([(claimed(esc), promote(esc))], "worker-7")


def test_csv_export_round_trips_rows_and_manifest_hash(scratch, tmp_path):
    _chains(scratch, 5)
    out = tmp_path / "audit.csv"
    export(PostgresLedgerSearch(scratch), "csv", out, AuditFilter())
    doc = json.loads(manifest_path(out).read_text())
    assert doc["row_count"] == 10
    assert doc["columns"] == list(COLUMNS)
    assert doc["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    rows = list(read_csv(out))
    with scratch.connect() as conn:
        stored = conn.execute(
            sa.text(f"SELECT {', '.join(COLUMNS)} FROM escalation_audit"
                    " ORDER BY decided_at, dispute_id, seq")
        ).mappings().all()
    assert len(rows) == len(stored)
    for got, want in zip(rows, stored, strict=True):
        assert got == {k: (bytes(v) if isinstance(v, memoryview) else v) for k, v in want.items()}
    # the re-imported rows still verify as hash chains, and re-export is byte-identical
    by_dispute: dict = {}
    for r in rows:
        by_dispute.setdefault(r["dispute_id"], []).append(r)
    assert all(verify_chain(sorted(c, key=lambda r: r["seq"])) is None
               for c in by_dispute.values())
    assert write_csv(iter(rows), tmp_path / "again.csv") == doc["sha256"]


def test_export_formats_times_as_utc_iso_and_money_as_strings(scratch, tmp_path):
    _chains(scratch, 1)
    out = tmp_path / "audit.jsonl"
    export(PostgresLedgerSearch(scratch), "jsonl", out, AuditFilter(since=T0 + timedelta(seconds=1),
                                              until=datetime(2100, 1, 1, tzinfo=UTC)))
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 1  # only the PROMOTED row is decided at or after T0
    row = lines[0]
    assert row["materiality"] == "1250.00"
    assert row["decided_at"].endswith("Z") and "T" in row["decided_at"]
    assert row["actor"] == "worker-7"
    assert set(row) == set(COLUMNS)


def test_search_filters_by_actor_tier_and_decision(scratch):
    _chains(scratch, 3)
    ledger = PostgresLedgerSearch(scratch)
    assert len(search(ledger, AuditFilter(actor="worker-7"))) == 3
    assert len(search(ledger, AuditFilter(decision="PROMOTED_TO_SENIOR", tier="senior"))) == 3
    assert search(ledger, AuditFilter(ladder_version=2)) == []
    one = search(ledger, AuditFilter(actor="svc"), limit=1)[0]
    assert one.calendar_version is None and one.chain_created_at is not None


GENERATE = """
INSERT INTO escalation_audit (dispute_id, seq, event, match_decision, ladder, ladder_version,
    materiality, decided_at, actor, trace_id, source_hash, details, prev_hash, row_hash,
    chain_created_at)
SELECT md5(g::text)::uuid, 1, 'PROMOTED', 'PROMOTED_TO_SENIOR', 'l', 1, g / 100.0, now(),
       'w', 't', 's', '{}'::jsonb, decode(repeat('00', 32), 'hex'), sha256(int8send(g)), now()
  FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS g
"""


def _peak_export(engine: sa.Engine, path) -> int:
    tracemalloc.start()
    try:
        export(PostgresLedgerSearch(engine), "csv", path, AuditFilter())
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_export_peak_memory_does_not_grow_with_row_count(scratch, tmp_path):
    with scratch.begin() as conn:
        conn.execute(sa.text(GENERATE), {"lo": 1, "hi": 5_000})
    small = _peak_export(scratch, tmp_path / "a.csv")
    with scratch.begin() as conn:
        conn.execute(sa.text(GENERATE), {"lo": 5_001, "hi": 40_000})
    large = _peak_export(scratch, tmp_path / "b.csv")
    # 8x the rows; a buffering export would need ~8x the memory
    assert large < small * 2, (small, large)


FORMULAS = ["=HYPERLINK(\"http://evil.example\",\"x\")", "@SUM(A1:A9)", "+1+2", "-2+3",
            "\tcmd", "\r=1", "'=already quoted", "plain-id-42"]


def test_csv_export_neutralises_spreadsheet_formulas_and_still_round_trips(scratch, tmp_path):
    store = PostgresAuditStore(scratch)
    for ext in FORMULAS:
        store.record_enqueue(dataclasses.replace(make_escalation(), external_id=ext), "svc", T0)
    out = tmp_path / "audit.csv"
    export(PostgresLedgerSearch(scratch), "csv", out, AuditFilter())
    with out.open(newline="", encoding="utf-8") as fh:
        cells = [row[COLUMNS.index("external_id")] for row in list(csv.reader(fh))[1:]]
    assert sorted(cells) == sorted(("'" + e) if e[0] in "=+-@\t\r'" else e for e in FORMULAS)
    # no cell of any column starts with a formula trigger (OWASP CSV injection)
    with out.open(newline="", encoding="utf-8") as fh:
        for row in list(csv.reader(fh))[1:]:
            assert not any(c.startswith(("=", "+", "-", "@", "\t", "\r")) for c in row), row
    rows = list(read_csv(out))
    assert sorted(r["external_id"] for r in rows) == sorted(FORMULAS)
    assert write_csv(iter(rows), tmp_path / "again.csv") == hashlib.sha256(
        out.read_bytes()).hexdigest()
