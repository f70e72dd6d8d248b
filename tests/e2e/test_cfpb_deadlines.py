"""The CFPB sample with the CFPB ladder (15- and 60-day deadlines; docs/sla.md "Several
regulatory deadlines").

Import ``cfpb_complaints_sample.csv`` from the public sample data (``SHARED_DATA`` in
tests/conftest.py; skipped when absent) with docs/examples/cfpb_ladder_mapping.toml,
check every complaint's two deadlines against an independent computation from "Date sent to
company", then fire with one in-process worker until nothing is due: every breach fires once,
in due order, and every complaint walks the whole ladder to TERMINAL exactly once.

Semantics (docs/sla.md "Regulatory deadlines"): the complaints are from 2012-2023, so every
deadline is past. The first tier's due (anchor + 5 days) is past: it fires at once. Each
promotion's due is ``now + window`` capped at the next tier's ``deadline - buffer``; a cap in
the past means "fire now", so the later tiers fire at once too.
"""

from __future__ import annotations

import csv
import itertools
from collections import Counter, defaultdict
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueMany, enqueue_many
from escalation.service_layer.fire import FireDue, fire_due
from escalation.service_layer.importer import ColumnMapping, plan_import, stable_dispute_id
from tests.conftest import SHARED_DATA

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = SHARED_DATA / "cfpb_complaints_sample.csv"
MAPPING = ROOT / "docs" / "examples" / "cfpb_ladder_mapping.toml"
NY = ZoneInfo("America/New_York")

pytestmark = pytest.mark.skipif(not SAMPLE.exists(), reason="CFPB sample not present")


def _days_after(sent: date, days: int) -> datetime:
    """Independent oracle: "Date sent to company" is a New York date (the institution's
    zone); N calendar days later the response is due by the end of that local day, i.e. at
    00:00 New York time the day after."""
    end = sent + timedelta(days=days + 1)
    return datetime(end.year, end.month, end.day, tzinfo=NY).astimezone(UTC)


def _expected() -> dict[Any, tuple[datetime, datetime]]:
    out: dict[Any, tuple[datetime, datetime]] = {}
    with SAMPLE.open(newline="") as fh:
        for row in csv.DictReader(fh):
            did, _ = stable_dispute_id(row["Complaint ID"], "cfpb")
            sent = date.fromisoformat(row["Date sent to company"])
            out[did] = (_days_after(sent, 15), _days_after(sent, 60))
    return out


def test_cfpb_sample_deadlines_computed_and_every_breach_fires_once_in_due_order(
    app: Any,
) -> None:
    mapping = ColumnMapping.from_file(MAPPING)
    with SAMPLE.open(newline="") as fh:
        plan = plan_import(fh, mapping)
    assert plan.errors == []
    expected = _expected()
    results = enqueue_many(
        EnqueueMany(requests=[req for _, req in plan.requests], actor="import",
                    default_ladder=app.settings.default_ladder),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )
    assert len(results) == len(expected) and all(r.created for r in results)

    # Deadlines: carried by every escalation, recorded on the ENQUEUED rows.
    for r in results:
        esc = r.escalation
        d15, d60 = expected[esc.dispute_id]
        assert esc.ladder == "cfpb_complaint_response" and esc.ladder_version == 4
        assert dict(esc.deadlines) == {"company_response": d15, "final_response": d60}
        assert esc.regulatory_deadline == d15  # caps the first tier
    sample = [r.escalation.dispute_id for r in results[:50]]
    for did in sample:
        enq = app.store.trail(did)[0]
        d15, d60 = expected[did]
        assert enq.event == "ENQUEUED" and enq.regulatory_deadline == d15
        assert enq.calendar_version and enq.calendar_version.startswith(
            "us_federal_reserve@America/New_York:fed-")  # calendar, zone, version
        assert enq.details["deadlines"] == {
            "company_response": d15.isoformat(), "final_response": d60.isoformat()}

    # Fire with one in-process worker until nothing is due.
    fired = 0
    for _ in range(200):
        report = fire_due(
            FireDue(batch_size=500, lease_ms=60_000, worker_id="w1"),
            CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                      calendars=app.calendars),
        )
        fired += report.recorded
        if report.claimed == 0:
            break
    n = len(expected)
    assert fired == 3 * n  # analyst -> senior -> compliance -> terminal, once each

    rows = [row for did in expected for row in app.store.trail(did)]
    per_dispute: dict[Any, list[str]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: (r.dispute_id, r.seq)):
        per_dispute[row.dispute_id].append(row.match_decision)
    assert Counter(tuple(v) for v in per_dispute.values()) == {
        ("ENQUEUED", "PROMOTED_TO_SENIOR", "PROMOTED_TO_COMPLIANCE", "TERMINAL_ESCALATION"): n}
    for row in rows:
        d15, d60 = expected[row.dispute_id]
        if row.match_decision == "PROMOTED_TO_SENIOR":
            assert row.regulatory_deadline == d15
        elif row.match_decision == "PROMOTED_TO_COMPLIANCE":
            # the terminal tier is capped by the 60-day final response deadline
            assert row.regulatory_deadline == d60
            assert row.next_due_at == row.decided_at  # cap in the past: due at once

    # Due order within batch granularity: group the decisions by claim instant; every due
    # time of a batch is <= every due time of the next batch.
    batches: dict[datetime, list[datetime]] = defaultdict(list)
    for row in rows:
        if row.event in ("PROMOTED", "TERMINAL"):
            assert row.due_at is not None
            batches[row.decided_at].append(row.due_at)
    ordered = [batches[k] for k in sorted(batches)]
    for earlier, later in itertools.pairwise(ordered):
        assert max(earlier) <= min(later)
    assert app.scheduler.stats()["pending"] == 0
