"""SLA report figures equal a fixture computed by hand (docs/audit.md "SLA report")."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from escalation.domain.errors import InvalidInput
from escalation.service_layer.sla_report import CSV_COLUMNS, compute, to_csv, to_html

H = timedelta(hours=1)
W0 = datetime(2026, 3, 1, tzinfo=UTC)
W1 = datetime(2026, 4, 1, tzinfo=UTC)


def _row(d, seq, event, frm, to, at, due=None, deadline=None):
    return {"dispute_id": d, "seq": seq, "event": event, "from_tier": frm, "to_tier": to,
            "ladder": "dispute_review", "due_at": due, "decided_at": at,
            "regulatory_deadline": deadline}


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
    report = compute(_fixture(), W0, W1)
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
    }


def test_csv_and_html_outputs_are_self_contained():
    report = compute(_fixture(), W0, W1)
    lines = to_csv(report).splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS)
    assert len(lines) == 3
    page = to_html(report)
    assert page.count("<svg") == 2
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "<script" not in page and "<link" not in page


def test_report_refuses_an_empty_window():
    with pytest.raises(InvalidInput):
        compute([], W1, W0)
