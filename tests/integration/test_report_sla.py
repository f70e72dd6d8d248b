"""SLA report figures equal a fixture computed by hand (docs/audit.md "SLA report")."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from escalation.domain.errors import InvalidInput
from escalation.entrypoints.sla_html import to_html
from escalation.service_layer.sla_report import CSV_COLUMNS, ReportSla, compute, to_csv

H = timedelta(hours=1)
W0 = datetime(2026, 3, 1, tzinfo=UTC)
W1 = datetime(2026, 4, 1, tzinfo=UTC)


def _row(d, seq, event, frm, to, at, due=None, deadline=None, ladder="dispute_review",
         details_entered=None, state_entered=None):
    return {"dispute_id": d, "seq": seq, "event": event, "from_tier": frm, "to_tier": to,
            "ladder": ladder, "due_at": due, "decided_at": at,
            "regulatory_deadline": deadline,
            "details_entered_at": None if details_entered is None else details_entered.isoformat(),
            "state_entered_tier_at": state_entered}


S = timedelta(seconds=1)
T = W0 + 24 * H
NOW = T + 200 * H  # deadlines after this are pending


def _imported_fixture():
    """Disputes imported long after they opened (the CFPB sample's shape), ladder "cfpb"."""
    e, f, g, h = (uuid.UUID(int=i) for i in range(11, 15))
    t = T
    kw = {"ladder": "cfpb"}
    return [
        # E: opened t-72h (projection entered_tier_at; still in its first tier), enqueued at t,
        # resolved at t+2h; deadline t-12h passed before it was even enqueued -> missed
        _row(e, 1, "ENQUEUED", None, "standard", t, due=t + 24 * H, deadline=t - 12 * H,
             state_entered=t - 72 * H, **kw),
        _row(e, 2, "CANCELLED", "standard", "standard", t + 2 * H, deadline=t - 12 * H, **kw),
        # F: opened t-200h (recorded in the ENQUEUED details), due t-100h, enqueued at t;
        # the worker catches up: standard -> senior at t+10s (late); the senior due was capped
        # by the long-passed deadline, so it equals the senior entry (t+10s): the promotion to
        # compliance at t+20s and the terminal at t+30s are late, not "within 60 s of due".
        _row(f, 1, "ENQUEUED", None, "standard", t, due=t - 100 * H, deadline=t - 20 * H,
             details_entered=t - 200 * H, state_entered=t + 20 * S, **kw),
        _row(f, 2, "PROMOTED", "standard", "senior", t + 10 * S, due=t - 100 * H,
             deadline=t - 20 * H, **kw),
        _row(f, 3, "PROMOTED", "senior", "compliance", t + 20 * S, due=t + 10 * S,
             deadline=t - 20 * H, **kw),
        _row(f, 4, "TERMINAL", "compliance", None, t + 30 * S, due=t + 20 * S,
             deadline=t - 20 * H, **kw),
        # G: deadline t+500h, after NOW, still open -> pending (neither met nor missed)
        _row(g, 1, "ENQUEUED", None, "standard", t, due=t + 600 * H, deadline=t + 500 * H, **kw),
        # H: promoted on time at t+24h; deadline t+30h passes while open in senior -> missed.
        # The projection's entered_tier_at (t+24h) is the *senior* entry: not used for standard.
        _row(h, 1, "ENQUEUED", None, "standard", t, due=t + 24 * H, deadline=t + 30 * H,
             state_entered=t + 24 * H, **kw),
        _row(h, 2, "PROMOTED", "standard", "senior", t + 24 * H, due=t + 24 * H,
             deadline=t + 30 * H, **kw),
    ]


def _fixture():
    a, b, c, d = (uuid.UUID(int=i) for i in range(1, 5))
    t = W0 + 24 * H
    return [
        # A: standard 48 h, promoted 10 s after due (on time), then senior, resolved after 5 h
        _row(a, 1, "ENQUEUED", None, "standard", t, deadline=t + 100 * H),
        _row(a, 2, "PROMOTED", "standard", "senior", t + 48 * H + timedelta(seconds=10),
             due=t + 48 * H, deadline=t + 100 * H),
        _row(a, 3, "CANCELLED", "senior", "senior", t + 53 * H, deadline=t + 100 * H),
        # B: standard 24 h, promoted 5 minutes late; senior terminal 2 h later, on due
        _row(b, 1, "ENQUEUED", None, "standard", t),
        _row(b, 2, "PROMOTED", "standard", "senior", t + 24 * H + 5 * 60 * timedelta(seconds=1),
             due=t + 24 * H),
        _row(b, 3, "TERMINAL", "senior", None, t + 26 * H + 5 * 60 * timedelta(seconds=1),
             due=t + 26 * H + 5 * 60 * timedelta(seconds=1)),
        # C: standard, resolved after 12 h
        _row(c, 1, "ENQUEUED", None, "standard", t, deadline=t + 10 * H),
        _row(c, 2, "CANCELLED", "standard", "standard", t + 12 * H, deadline=t + 10 * H),
        # D: entered before the window, promoted inside it (counts as breached, not entered)
        _row(d, 1, "ENQUEUED", None, "standard", W0 - 30 * H),
        _row(d, 2, "PROMOTED", "standard", "senior", W0 + 6 * H, due=W0 + 6 * H),
    ]


def test_report_figures_match_the_hand_computed_fixture():
    report = compute(_fixture(), ReportSla(W0, W1, now=NOW))
    got = {f.tier: f.as_row() for f in report.tiers}
    # standard: entered A, B, C = 3; on time A, D = 2; late B = 1; resolved C = 1
    # time in tier: A 48h+10s, B 24h+300s, C 12h, D 36h -> sorted 12h, 24h5m, 36h, 48h0m10s
    # median = (24h5m + 36h) / 2 = 108150 s; p95 = ceil(3.8) = 4th = 172810 s
    # regulatory: C's deadline t+10h, in standard, not resolved by then -> missed
    assert got["standard"] == {
        "ladder": "dispute_review", "tier": "standard", "entered": 3,
        "promoted_on_time": 2, "promoted_late": 1, "breached": 3, "resolved": 1,
        "median_time_in_tier_s": "108150.000", "p95_time_in_tier_s": "172810.000",
        "regulatory_met": 0, "regulatory_missed": 1,
        "regulatory_at_risk": 0, "regulatory_pending": 0, "regulatory_undetermined": 0,
    }
    # senior: entered A, B, D = 3; B terminal on due = on time; A resolved (5 h);
    # A: t+48h+10s -> t+53h = 17990 s; B 2 h = 7200 s -> median (7200 + 17990) / 2 =
    # 12595 s, p95 = ceil(1.9) = 2nd = 17990 s
    # regulatory: A's deadline t+100h, A resolved at t+53h in senior -> met
    assert got["senior"] == {
        "ladder": "dispute_review", "tier": "senior", "entered": 3,
        "promoted_on_time": 1, "promoted_late": 0, "breached": 1, "resolved": 1,
        "median_time_in_tier_s": "12595.000", "p95_time_in_tier_s": "17990.000",
        "regulatory_met": 1, "regulatory_missed": 0,
        "regulatory_at_risk": 0, "regulatory_pending": 0, "regulatory_undetermined": 0,
    }


def test_imported_disputes_count_time_from_tier_entry_and_passed_deadlines_as_missed():
    report = compute(_fixture() + _imported_fixture(), ReportSla(W0, W1, now=NOW))
    got = {f.tier: f.as_row() for f in report.tiers if f.ladder == "cfpb"}
    # standard: entered E, F, G, H = 4; on time H (due t+24h, decided t+24h) = 1;
    # late F (due t-100h) = 1; resolved E = 1.
    # time in tier from the tier *entry*: E t-72h -> t+2h = 74 h = 266400 s;
    # F t-200h -> t+10s = 720010 s; H t -> t+24h = 86400 s (projection value ignored: H left
    # its first tier) -> median 266400, p95 = ceil(2.85) = 3rd = 720010.
    # regulatory: E (before enqueue) and F (before enqueue) missed in standard; G pending
    # (counted: every state has its column).
    assert got["standard"] == {
        "ladder": "cfpb", "tier": "standard", "entered": 4,
        "promoted_on_time": 1, "promoted_late": 1, "breached": 2, "resolved": 1,
        "median_time_in_tier_s": "266400.000", "p95_time_in_tier_s": "720010.000",
        "regulatory_met": 0, "regulatory_missed": 2,
        "regulatory_at_risk": 0, "regulatory_pending": 1, "regulatory_undetermined": 0,
    }
    # senior: entered F, H = 2; F left it 10 s after entering, but its due time was its entry
    # (clamped: entered already overdue) -> late. H's deadline passed while open -> missed.
    assert got["senior"] == {
        "ladder": "cfpb", "tier": "senior", "entered": 2,
        "promoted_on_time": 0, "promoted_late": 1, "breached": 1, "resolved": 0,
        "median_time_in_tier_s": "10.000", "p95_time_in_tier_s": "10.000",
        "regulatory_met": 0, "regulatory_missed": 1,
        "regulatory_at_risk": 0, "regulatory_pending": 0, "regulatory_undetermined": 0,
    }
    assert got["compliance"] == {
        "ladder": "cfpb", "tier": "compliance", "entered": 1,
        "promoted_on_time": 0, "promoted_late": 1, "breached": 1, "resolved": 0,
        "median_time_in_tier_s": "10.000", "p95_time_in_tier_s": "10.000",
        "regulatory_met": 0, "regulatory_missed": 0,
        "regulatory_at_risk": 0, "regulatory_pending": 0, "regulatory_undetermined": 0,
    }


def test_a_resolved_row_ends_the_tier_stay_as_resolved_like_a_cancel():
    """RESOLVED (``resolve``, ADR 0010) ends a stay as resolved, as CANCELLED does; a
    resolution after TERMINAL ends no stay (TERMINAL already did) but counts as resolved in
    the terminal tier."""
    r, c, z = (uuid.UUID(int=i) for i in range(21, 24))
    t = T
    rows = [
        # R: resolved in standard after 3 h
        _row(r, 1, "ENQUEUED", None, "standard", t, due=t + 24 * H),
        _row(r, 2, "RESOLVED", "standard", "standard", t + 3 * H),
        # C: cancelled in senior after 2 h there
        _row(c, 1, "ENQUEUED", None, "standard", t, due=t + 24 * H),
        _row(c, 2, "PROMOTED", "standard", "senior", t + 24 * H, due=t + 24 * H),
        _row(c, 3, "CANCELLED", "senior", "senior", t + 26 * H),
        # Z: terminal out of senior, then resolved: breached and resolved in senior
        _row(z, 1, "ENQUEUED", None, "standard", t, due=t + 24 * H),
        _row(z, 2, "PROMOTED", "standard", "senior", t + 24 * H, due=t + 24 * H),
        _row(z, 3, "TERMINAL", "senior", None, t + 48 * H, due=t + 48 * H),
        _row(z, 4, "RESOLVED", None, None, t + 50 * H),
    ]
    got = {f.tier: f for f in compute(rows, ReportSla(W0, W1, now=NOW)).tiers}
    assert (got["standard"].resolved, got["standard"].breached) == (1, 2)
    assert sorted(got["standard"].durations) == [3 * 3600.0, 24 * 3600.0, 24 * 3600.0]
    assert (got["senior"].resolved, got["senior"].breached) == (2, 1)
    assert sorted(got["senior"].durations) == [2 * 3600.0, 24 * 3600.0]
    # the same resolution outside the window counts nowhere
    late = compute(rows, ReportSla(W0, T + 49 * H, now=NOW)).tiers
    assert {f.tier: f.resolved for f in late} == {"standard": 1, "senior": 1}


def test_json_rows_give_durations_as_numbers_and_null_when_no_stay_ended():
    from escalation.service_layer.sla_report import grouped

    a, b = (uuid.UUID(int=i) for i in range(31, 33))
    t = T
    rows = [
        _row(a, 1, "ENQUEUED", None, "standard", t, due=t + 24 * H),
        _row(a, 2, "RESOLVED", "standard", "standard",
             t + 227 * S + timedelta(microseconds=367_000)),
        _row(b, 1, "ENQUEUED", None, "senior", t, due=t + 24 * H),  # still open
    ]
    report = compute(rows, ReportSla(W0, W1, now=NOW))
    doc = grouped(report)["dispute_review"]
    by_tier = {r["tier"]: r for r in doc}
    assert by_tier["standard"]["median_time_in_tier_s"] == 227.367
    assert by_tier["standard"]["p95_time_in_tier_s"] == 227.367
    assert by_tier["senior"]["median_time_in_tier_s"] is None
    assert by_tier["senior"]["p95_time_in_tier_s"] is None
    import json

    text = json.dumps(doc)
    assert '"median_time_in_tier_s": 227.367' in text and '"p95_time_in_tier_s": null' in text
    csv_row = {f.tier: f.as_row() for f in report.tiers}  # the CSV keeps its text cells
    assert csv_row["standard"]["median_time_in_tier_s"] == "227.367"
    assert csv_row["senior"]["median_time_in_tier_s"] == ""


def test_a_deadline_after_now_is_pending_and_one_at_or_before_now_is_missed():
    g = _imported_fixture()[6:7]
    assert compute(g, ReportSla(W0, W1, now=NOW)).tiers[0].regulatory_missed == 0
    assert compute(g, ReportSla(W0, W1)).tiers[0].regulatory_missed == 1  # now defaults to --to


def test_csv_and_html_outputs_are_self_contained():
    report = compute(_fixture(), ReportSla(W0, W1))
    lines = to_csv(report).splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS)
    assert len(lines) == 3
    page = to_html(report)
    assert page.count("<svg") == 2
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "<script" not in page and "<link" not in page


def test_report_refuses_an_empty_window():
    with pytest.raises(InvalidInput):
        compute([], ReportSla(W1, W0))


def test_ledger_query_gives_the_first_tier_entry_of_an_imported_dispute(app, engine):
    """The report's query carries the projection's entered_tier_at (the opening instant),
    not only the ENQUEUED decided_at (when it was enqueued)."""
    from escalation.adapters.report_queries import SLA_ROWS, PostgresReports
    from escalation.service_layer import sla_report
    from escalation.service_layer.enqueue import EnqueueRequest
    from tests.e2e.helpers import enqueue

    opened = datetime.now(UTC).replace(microsecond=0) - 30 * 24 * H
    (did,) = enqueue(app, [EnqueueRequest(uuid.uuid4(), "10.00", "ab12", opened_at=opened)])
    with engine.connect() as conn:
        rows = conn.execute(SLA_ROWS, {"since": opened - H, "until": opened + 3000 * H})
        mine = [r for r in rows.mappings() if r["dispute_id"] == did]
    assert [r["event"] for r in mine] == ["ENQUEUED"]
    assert mine[0]["state_entered_tier_at"] == opened
    assert mine[0]["decided_at"] > opened + 29 * 24 * H
    report = sla_report.build(sla_report.ReportSla(opened - H, opened + 3000 * H),
                              PostgresReports(engine))
    assert any(f.entered >= 1 for f in report.tiers)


def test_every_deadline_of_a_multi_deadline_ladder_is_counted_and_listed() -> None:
    # CFPB (15 and 60 days): complaint sent 2026-03-02 (New York). company_response is due
    # by the end of 03-17 EDT (03-18 04:00Z), final_response by the end of 05-01 (05-02
    # 04:00Z). Resolved 03-20 15:00Z: the 15-day response was missed by 59 h (business days
    # after 03-17: Wed 18, Thu 19, Fri 20 -> 3), the 60-day one met. Before, only the last
    # deadline (60 days, met) was counted and the missed 15-day one appeared nowhere.
    d = uuid.UUID(int=99)
    d15, d60 = datetime(2026, 3, 18, 4, tzinfo=UTC), datetime(2026, 5, 2, 4, tzinfo=UTC)
    enq = _row(d, 1, "ENQUEUED", None, "complaint_analyst", datetime(2026, 3, 2, 5, tzinfo=UTC),
               due=datetime(2026, 3, 7, 5, tzinfo=UTC), deadline=d15, ladder="cfpb")
    enq.update(ladder_version=3, external_id="7453262", enq_details={
        "deadlines": {"company_response": d15.isoformat(), "final_response": d60.isoformat()},
        "deadline_rules": {"company_response": {"at": d15.isoformat(),
                                                "citation": "CFPB portal (15 days)"},
                           "final_response": {"at": d60.isoformat(),
                                              "citation": "CFPB portal (60 days)"}},
        "institution": {"timezone": "America/New_York", "calendar": "us_federal_reserve"}})
    cancelled = _row(d, 2, "CANCELLED", "complaint_analyst", "complaint_analyst",
                     datetime(2026, 3, 20, 15, tzinfo=UTC), deadline=d15, ladder="cfpb")
    report = compute([enq, cancelled], ReportSla(W0, datetime(2026, 6, 1, tzinfo=UTC),
                                                 now=datetime(2026, 6, 1, tzinfo=UTC)))
    (fig,) = report.tiers
    assert (fig.regulatory_met, fig.regulatory_missed) == (1, 1)
    by_name = {o.name: o for o in report.deadlines}
    assert by_name["final_response"].status == "met"
    (missed,) = report.missed
    assert missed.as_row() == {
        "dispute_id": str(d), "external_id": "7453262", "ladder": "cfpb@3",
        "deadline": "company_response", "citation": "CFPB portal (15 days)",
        "deadline_at": "2026-03-18T00:00:00-04:00", "status": "missed", "basis": "record",
        "met_or_missed_at": "2026-03-18T00:00:00-04:00", "action": "resolution",
        "action_at": "2026-03-20T11:00:00-04:00", "actor": "",
        "action_recorded_at": "2026-03-20T11:00:00-04:00", "late_hours": "59.00",
        "late_business_days": "3", "tier_at_deadline": "complaint_analyst"}


def test_missed_csv_neutralises_formula_cells_and_uses_crlf_line_ends() -> None:
    # docs/audit.md: CSV (audit export and `report sla --format csv`) has RFC 4180 CRLF line
    # ends and neutralises formula injection (domain/csv_cells.py). `--missed` wrote an
    # external id "=HYPERLINK(...)" raw, with "\n" line ends.
    import csv
    import io

    from escalation.domain.csv_cells import restore_cell
    from escalation.service_layer.sla_report import MISSED_COLUMNS, missed_csv

    evil = '=HYPERLINK("http://evil.example/","x")'
    d = uuid.UUID(int=98)
    d15 = datetime(2026, 3, 18, 4, tzinfo=UTC)
    enq = _row(d, 1, "ENQUEUED", None, "complaint_analyst", datetime(2026, 3, 2, 5, tzinfo=UTC),
               due=datetime(2026, 3, 7, 5, tzinfo=UTC), deadline=d15, ladder="cfpb")
    enq.update(ladder_version=3, external_id=evil, enq_details={
        "deadlines": {"company_response": d15.isoformat()},
        "deadline_rules": {"company_response": {"at": d15.isoformat(),
                                                "citation": "@SUM(1+1)"}},
        "institution": {"timezone": "America/New_York", "calendar": "us_federal_reserve"}})
    report = compute([enq], ReportSla(W0, datetime(2026, 6, 1, tzinfo=UTC),
                                      now=datetime(2026, 6, 1, tzinfo=UTC)))
    text = missed_csv(report)
    assert text.count("\r\n") == 2 and "\n" not in text.replace("\r\n", "")
    header, row = csv.reader(io.StringIO(text, newline=""))
    assert tuple(header) == MISSED_COLUMNS
    cells = dict(zip(header, row, strict=True))
    assert cells["external_id"] == "'" + evil
    assert cells["citation"] == "'@SUM(1+1)"
    assert restore_cell(cells["external_id"]) == evil
    assert cells["dispute_id"] == str(d) and cells["status"] == "missed"


# --------------------------------------------------------------------------- one answer
REG_E = "reg_e_error_resolution"
REG_E_ATTRS = {"new_account": False, "point_of_sale": False, "foreign_initiated": False}


def _reg_e_v3_disputes(app):
    """Reg E v3 disputes recorded through the use cases on real Redis and PostgreSQL, notice
    of error received 70 days ago (every anchor clock has passed) or yesterday:
    credited on day 3 / nothing recorded / determination asserted timely by the source /
    asserted late / resolved late / a fresh one."""
    from escalation.service_layer.enqueue import EnqueueRequest
    from escalation.service_layer.obligations import (
        ObligationPorts,
        RecordAction,
        Resolve,
        record_action,
        resolve,
    )
    from tests.e2e.helpers import enqueue

    now = app.scheduler.time()
    old, fresh = now - timedelta(days=70), now - timedelta(days=1)
    names = ["credited", "silent", "per_source_met", "per_source_missed", "resolved_late",
             "fresh"]
    reqs = [EnqueueRequest(uuid.uuid4(), "125.00", "ab" * 32, opened_at=at, anchor_at=at,
                           ladder=REG_E, external_id=f"OA-{uuid.uuid4().hex[:6]}-{n}",
                           attributes=REG_E_ATTRS)
            for n, at in zip(names, [old] * 5 + [fresh], strict=True)]
    ids = dict(zip(names, enqueue(app, reqs), strict=True))
    kw = {"scheduler": app.scheduler, "store": app.store, "ladders": app.ladders,
          "calendars": app.calendars}
    record_action(RecordAction(ids["credited"], "provisional_credit", old + timedelta(days=2),
                               "ops.alice", "k-credit", amount="125.00", currency="USD"),
                  ObligationPorts(**kw))
    for name, timely in (("per_source_met", True), ("per_source_missed", False)):
        record_action(RecordAction(ids[name], "determination", None, "importer", f"k-{name}",
                                   asserted_timely=timely, asserted_by="Timely response?"),
                      ObligationPorts(**kw))
    resolve(Resolve(ids["resolved_late"], "error_corrected", "ops.bob", "k-res"), **kw)
    return ids


def test_report_sla_and_audit_search_deadlines_agree_with_the_console(app, engine, cli_env):
    import json

    from escalation.adapters.console_queries import PostgresConsoleQueries
    from escalation.adapters.report_queries import PostgresReports
    from escalation.service_layer import deadline_outcomes as dl
    from escalation.service_layer import sla_report
    from tests.helpers import run_cli

    ids = _reg_e_v3_disputes(app)
    queries, reports = PostgresConsoleQueries(engine), PostgresReports(engine)
    now = queries.now()

    def console(did):
        return {o.name: (o.status, o.basis, o.action) for o in dl.deadline_outcomes(
            dl.DeadlineSources(queries, app.ladders.get, app.calendars), dispute_id=did,
            now=now)}

    def search(did):
        return {o.name: (o.status, o.outcome.basis, o.outcome.action)
                for o in sla_report.dispute_deadlines(sla_report.DisputeDeadlines(did, now=now),
                                                      reports, app.calendars, app.ladders.get)}

    seen = {n: console(did) for n, did in ids.items()}
    for n, did in ids.items():
        assert search(did) == seen[n], n
    d10, d45 = "determine_or_provisionally_credit", "investigation"
    assert seen["credited"][d10] == ("met", "record", "provisional_credit")
    assert seen["credited"][d45][0] == "missed"  # 45 days open, 70 days ago
    assert seen["credited"]["provisional_credit_notice"] == ("missed", None, None)
    assert seen["silent"][d10] == ("missed", None, None)
    assert seen["per_source_met"][d10] == ("met", "source", "determination")
    assert seen["per_source_missed"][d10] == ("missed", "source", "determination")
    assert seen["per_source_missed"][d45][0] == "undetermined"
    assert seen["resolved_late"][d10] == ("missed", "record", "resolution")
    assert seen["fresh"][d10][0] == "pending"
    # report sla over the window holding every clock: the same states, dispute by dispute
    report = sla_report.build(
        ReportSla(now - timedelta(days=80), now + timedelta(days=80), now=now), reports,
        app.calendars, app.ladders.get)
    for n, did in ids.items():
        got = {o.name: (o.status, o.outcome.basis, o.outcome.action)
               for o in report.deadlines if o.dispute_id == str(did)}
        want = {k: v for k, v in seen[n].items() if k in got}
        assert got == want and got, n
    missed = {(o.dispute_id, o.name) for o in report.missed}
    # the resolved dispute's stay ends as resolved (the ledger's RESOLVED row, as read by
    # the report's query); the others are still open in their first tier
    at, rows = reports.sla_rows(now - timedelta(days=80), now + timedelta(days=80))
    mine_rows = [r for r in rows if r["dispute_id"] in set(ids.values())]
    window = ReportSla(now - timedelta(days=80), now + timedelta(days=80), now=at)
    first = {f.tier: f for f in sla_report.compute(mine_rows, window, app.calendars,
                                                   app.ladders.get).tiers}
    assert len(first) == 1 and next(iter(first.values())).resolved == 1
    assert (str(ids["credited"]), d10) not in missed
    assert (str(ids["silent"]), d10) in missed
    unknown = next(o for o in report.missed if o.dispute_id == str(ids["per_source_missed"]))
    assert (unknown.as_row()["late_hours"], unknown.as_row()["late_business_days"]) == (
        "unknown", "unknown")
    # the CLI: audit search --deadlines --json, and report sla --missed --format csv
    for n in ("credited", "per_source_missed", "resolved_late"):
        r = run_cli(cli_env, "audit", "search", "--dispute", str(ids[n]), "--deadlines",
                    "--json")
        assert r.returncode == 0, r.stderr
        rows = [json.loads(line) for line in r.stdout.splitlines()]
        assert {x["deadline"]: (x["status"], x["basis"] or None, x["action"] or None)
                for x in rows} == seen[n], n
    cred = next(json.loads(line) for line in run_cli(
        cli_env, "audit", "search", "--dispute", str(ids["credited"]), "--deadline", d10,
        "--json").stdout.splitlines())
    assert (cred["status"], cred["action"], cred["actor"]) == ("met", "provisional_credit",
                                                               "ops.alice")
    assert (cred["late_hours"], cred["late_business_days"]) == (None, None)  # not missed
    r = run_cli(cli_env, "report", "sla", "--from", (now - timedelta(days=80)).isoformat(),
                "--to", (now + timedelta(days=80)).isoformat(), "--missed", "--format", "csv")
    assert r.returncode == 0, r.stderr
    import csv
    import io

    cli_missed = {(x["dispute_id"], x["deadline"]) for x in csv.DictReader(io.StringIO(r.stdout))}
    mine = {str(d) for d in ids.values()}
    assert {m for m in cli_missed if m[0] in mine} == {m for m in missed if m[0] in mine}


def test_report_sla_html_from_the_cli_is_the_jinja_page(cli_env):
    from tests.helpers import run_cli

    run = run_cli(cli_env, "report", "sla", "--from", "2026-01-01T00:00:00Z",
                  "--to", "2027-01-01T00:00:00Z", "--format", "html")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("<!DOCTYPE html>") and run.stdout.count("<svg") == 2
    assert "<th>median_time_in_tier_s</th>" in run.stdout


def test_report_sla_json_from_the_cli_gives_numbers_or_null(cli_env):
    import json

    from tests.helpers import run_cli

    enq = run_cli(cli_env, "enqueue", "--dispute-id", str(uuid.uuid4()), "--source-hash",
                  "ab12", "--due-in", "2h", "--json")
    assert enq.returncode == 0, enq.stderr
    run = run_cli(cli_env, "report", "sla", "--from", "2000-01-01T00:00:00Z", "--to",
                  "2100-01-01T00:00:00Z", "--json")
    assert run.returncode == 0, run.stderr
    rows = [r for ladder in json.loads(run.stdout)["ladders"].values() for r in ladder]
    assert rows
    for row in rows:
        for key in ("median_time_in_tier_s", "p95_time_in_tier_s"):
            assert row[key] is None or type(row[key]) in (int, float), (key, row)
            assert row[key] != ""
