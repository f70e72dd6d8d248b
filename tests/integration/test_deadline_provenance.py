"""Every ledger row that sets or caps a due time names the deadline (name + citation); an
escalation missing an attribute its ladder needs is refused with nothing written."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from escalation.domain.errors import InvalidInput
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueOne, EnqueueRequest, enqueue_on_breach
from escalation.service_layer.fire import FireDue, fire_due
from tests.helpers import run_cli


def _req(did: uuid.UUID, **kw: Any) -> EnqueueRequest:
    return EnqueueRequest(dispute_id=did, materiality="10.00",
                          source_hash=hashlib.sha256(did.bytes).hexdigest(), **kw)


def test_reg_z_rows_name_the_deadline_and_its_citation(app: Any) -> None:
    did = uuid.uuid4()
    enqueue_on_breach(
        EnqueueOne(
            request=_req(did, ladder="reg_z_billing_error", opened_at=datetime(2026, 1, 5, 15,
                tzinfo=UTC),
             attributes={"cycle_closing_day": "6"}),
                   actor="t", default_ladder="dispute_review"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )
    enq = app.store.trail(did)[0]
    assert enq.details["deadlines"]["resolution"] == "2026-03-07T05:00:00+00:00"
    assert enq.details["deadline_rules"]["resolution"]["citation"] == "12 CFR 1026.13(c)(2)"
    assert enq.details["deadline"]["name"] == "acknowledgment"
    assert enq.details["deadline"]["citation"] == "12 CFR 1026.13(c)(1)"
    assert enq.details["attributes"] == {"cycle_closing_day": 6}
    assert enq.details["institution"] == {"timezone": "America/New_York",
                                          "calendar": "us_federal_reserve"}
    # the first tier is long past due: the promotion row names the deadline capping senior
    for _ in range(20):
        fire_due(
            FireDue(batch_size=500, lease_ms=60_000, worker_id="w1"),
            CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                      calendars=app.calendars),
        )
        if any(r.event == "PROMOTED" for r in app.store.trail(did)):
            break
    promoted = next(r for r in app.store.trail(did) if r.event == "PROMOTED")
    assert promoted.details["deadline"]["name"] == "resolution"
    assert promoted.details["deadline"]["citation"] == "12 CFR 1026.13(c)(2)"
    assert promoted.details["deadline"]["at"] == "2026-03-07T05:00:00+00:00"
    assert promoted.calendar_version.startswith("us_federal_reserve@America/New_York:")


def test_missing_attribute_is_refused_and_nothing_is_written(app: Any) -> None:
    did = uuid.uuid4()
    with pytest.raises(InvalidInput, match="cycle_closing_day"):
        enqueue_on_breach(
            EnqueueOne(request=_req(did, ladder="reg_z_billing_error",
                 opened_at=datetime(2026, 1, 5, 15, tzinfo=UTC)),
                       actor="t", default_ladder="dispute_review"),
            CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                      calendars=app.calendars),
        )
    assert app.store.get(did) is None
    assert not app.scheduler.payload(did)


def test_cli_enqueue_refuses_a_missing_attribute_in_one_line(cli_env: dict[str, str]) -> None:
    did = uuid.uuid4()
    res = run_cli(
        cli_env, "enqueue", "--dispute-id", str(did),
        "--source-hash", "ab" * 32, "--ladder", "reg_e_error_resolution",
        "--opened-at", "2026-03-05", "--attribute", "new_account=false")
    assert res.returncode == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "foreign_initiated" in lines[0], lines


def test_cli_enqueue_with_zone_and_attributes(cli_env: dict[str, str]) -> None:
    did = uuid.uuid4()
    res = run_cli(
        cli_env, "enqueue", "--dispute-id", str(did),
        "--source-hash", "ab" * 32, "--ladder", "reg_e_error_resolution",
        "--opened-at", "2026-03-05T23:30:00-08:00", "--timezone", "America/Los_Angeles",
        "--attribute", "new_account=false", "--attribute", "point_of_sale=true",
        "--attribute", "foreign_initiated=false", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    at = {d["name"]: d["deadline_at"] for d in json.loads(res.stdout)["deadlines"]}
    assert at["determine_or_provisionally_credit"] == "2026-03-20T00:00:00+00:00"
    # Reg E v3: the investigation period is available only with a timely provisional credit
    # (12 CFR 1005.11(c)(2)(i)); until one is recorded it falls with the 10 business days
    assert at["investigation"] == "2026-03-20T00:00:00+00:00"
    # its own window is on the ENQUEUED row. Point of sale: 90 days from Thu 2026-03-05
    # (LA) = 06-03 -> end of day PDT = 06-04 07:00Z
    shown = run_cli(cli_env, "audit", "show", str(did), "--json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "2026-06-04T07:00:00+00:00" in shown.stdout


def test_report_sla_missed_lists_each_deadline(app: Any, cli_env: dict[str, str]) -> None:
    did = uuid.uuid4()
    enqueue_on_breach(
        EnqueueOne(
            request=_req(did, ladder="cfpb_complaint_response", opened_at=datetime(2026, 1, 5, 15,
                                                                        tzinfo=UTC),
             external_id="CFPB-1"),
                   actor="t", default_ladder="dispute_review"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )
    res = run_cli(
        cli_env, "report", "sla", "--from",
        "2026-01-01T00:00:00+00:00", "--to", "2026-06-01T00:00:00+00:00", "--missed",
        "--format", "csv")
    assert res.returncode == 0, res.stderr[-2000:]
    # a citation may hold commas (the CSV quotes it): read it as CSV, not by splitting lines
    mine = [r for r in csv.DictReader(io.StringIO(res.stdout)) if r["dispute_id"] == str(did)]
    # 15 days from Mon 2026-01-05: end of 01-20 EST; 60 days: end of 03-06 EST
    assert sorted((r["deadline"], r["deadline_at"], r["tier_at_deadline"]) for r in mine) == [
        ("company_response", "2026-01-21T00:00:00-05:00", "complaint_analyst"),
        ("final_response", "2026-03-07T00:00:00-05:00", "complaint_analyst")]
    assert all(r["external_id"] == "CFPB-1" and r["ladder"] == "cfpb_complaint_response@4"
               and r["status"] == "missed" for r in mine)


def test_audit_search_answers_per_dispute_and_per_deadline(app: Any,
                                                          cli_env: dict[str, str]) -> None:
    import json

    did = uuid.uuid4()
    enqueue_on_breach(
        EnqueueOne(request=_req(did, ladder="cfpb_complaint_response",
             opened_at=datetime(2026, 1, 5, 15, tzinfo=UTC)),
                   actor="t", default_ladder="dispute_review"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )
    def run(*a: str) -> Any:
        return run_cli(cli_env, "audit", "search", "--dispute", str(did), *a)

    res = run("--deadlines", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(ln) for ln in res.stdout.splitlines()]
    assert [r["deadline"] for r in rows] == ["company_response", "final_response"]
    assert all(r["status"] == "missed" and float(r["late_hours"]) > 0 for r in rows)
    # company_response ended 2026-01-21 05:00Z; still open: late until now
    now = app.scheduler.time()
    late_h = (now - datetime(2026, 1, 21, 5, tzinfo=UTC)).total_seconds() / 3600
    assert abs(float(rows[0]["late_hours"]) - late_h) < 0.1
    assert rows[0]["late_business_days"] > 200
    res = run("--deadline", "final_response", "--json")
    assert [json.loads(ln)["deadline"] for ln in res.stdout.splitlines()] == ["final_response"]
    res = run("--deadline", "nope")
    assert res.returncode == 2 and "no deadline 'nope'" in res.stderr


def test_audit_search_deadlines_says_at_risk_as_the_console_does(
    app: Any, cli_env: dict[str, str]
) -> None:
    # A deadline due within 48 h is "at_risk" on the console; the CLI said "pending".
    import json
    from datetime import timedelta

    did = uuid.uuid4()
    enqueue_on_breach(
        EnqueueOne(request=_req(did, ladder="cfpb_complaint_response",
             opened_at=app.scheduler.time() - timedelta(days=14)),
                   actor="t", default_ladder="dispute_review"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )
    res = run_cli(cli_env, "audit", "search", "--dispute", str(did), "--deadlines", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    status = {r["deadline"]: r["status"] for r in map(json.loads, res.stdout.splitlines())}
    assert status == {"company_response": "at_risk", "final_response": "pending"}, status


def test_audit_search_deadlines_takes_the_external_id_with_source(
    app: Any, cli_env: dict[str, str]
) -> None:
    import json

    from escalation.service_layer.importer import stable_dispute_id

    ext = f"CFPB-{uuid.uuid4().hex[:8]}"
    did, _ = stable_dispute_id(ext, "cfpb")  # what an import of that Complaint ID records
    enqueue_on_breach(
        EnqueueOne(request=_req(did, ladder="cfpb_complaint_response", external_id=ext,
             opened_at=datetime(2026, 1, 5, 15, tzinfo=UTC)),
                   actor="t", default_ladder="dispute_review"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )
    for extra in (("--deadlines",), ("--deadline", "company_response")):
        res = run_cli(cli_env, "audit", "search", "--dispute", ext, "--source", "cfpb",
                      *extra, "--json")
        assert res.returncode == 0, res.stderr[-2000:]
        rows = [json.loads(ln) for ln in res.stdout.splitlines()]
        assert rows and {r["deadline"] for r in rows} <= {"company_response", "final_response"}
        assert all(r["dispute_id"] == str(did) for r in rows)


def test_every_row_names_its_calendar_terminal_and_cancelled_included(app: Any) -> None:
    from escalation.service_layer.cancel import cancel

    a, b = uuid.uuid4(), uuid.uuid4()
    for did in (a, b):
        enqueue_on_breach(
            EnqueueOne(request=_req(did, ladder="cfpb_complaint_response",
                 opened_at=datetime(2026, 1, 5, 15, tzinfo=UTC)),
                       actor="t", default_ladder="dispute_review"),
            CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                      calendars=app.calendars),
        )
    cancel(b, scheduler=app.scheduler, store=app.store, actor="t", reason="resolved")
    for _ in range(30):
        fire_due(
            FireDue(batch_size=500, lease_ms=60_000, worker_id="w1"),
            CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                      calendars=app.calendars),
        )
        if app.store.trail(a)[-1].event == "TERMINAL":
            break
    rows = app.store.trail(a) + app.store.trail(b)
    assert {r.event for r in rows} >= {"ENQUEUED", "PROMOTED", "TERMINAL", "CANCELLED"}
    for r in rows:
        assert r.calendar_version and r.calendar_version.startswith(
            "us_federal_reserve@America/New_York:"), (r.event, r.calendar_version)
