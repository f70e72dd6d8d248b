"""The console's server-side SVG charts and formatters: labels never under bars, exact
figures in titles, durations in human units, instants in the institution zone with offset."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from escalation.entrypoints import charts
from escalation.entrypoints.api.console.routes import fmt_at, fmt_duration

NS = "{http://www.w3.org/2000/svg}"


def test_bucket_counts_upper_bounds_exclusive():
    assert charts.bucket_counts([0, 3599, 3600, 86400, 10 * 86400, 30 * 86400]) == [
        2, 1, 0, 1, 0, 0, 2]


def test_met_missed_labels_sit_above_their_bars():
    svg = charts.met_missed("t", [("reg_e / standard", 3, 2), ("reg_e / senior", 0, 1)])
    root = ET.fromstring(svg)  # noqa: S314 - our own generated SVG
    labels = [t for t in root.iter(NS + "text") if "/" in (t.text or "")]
    rects = [r for r in root.iter(NS + "rect") if r.find(NS + "title") is not None]
    for label, (met, missed) in zip(labels, zip(rects[::2], rects[1::2], strict=True),
                                    strict=True):
        assert float(label.get("y")) < float(met.get("y"))  # baseline above the bar's top
        assert float(missed.get("x")) == float(met.get("x")) + float(met.get("width"))
    titles = [r.find(NS + "title").text for r in rects]
    assert titles == ["reg_e / standard: 3 met", "reg_e / standard: 2 missed",
                      "reg_e / senior: 0 met", "reg_e / senior: 1 missed"]


def test_distribution_shares_add_up_to_the_full_width():
    svg = charts.distribution("t", [("a / b", [1, 0, 3, 0, 0, 0, 0])])
    widths = [float(w) for w in re.findall(r'<rect x="[\d.]+" y="\d+" width="([\d.]+)" '
                                           r'height="16"', svg)]
    assert abs(sum(widths) - (charts.WIDTH - 120)) < 0.5
    assert "a / b: 3 stays of 4-24 h" in svg


def test_human_durations_and_zoned_instants():
    assert [fmt_duration(s) for s in (42, 300, 12000, 406800, None)] == [
        "42 s", "5 min", "3 h 20 min", "4 d 17 h", ""]
    ny = ZoneInfo("America/New_York")
    winter, summer = datetime(2024, 2, 15, 22, tzinfo=UTC), datetime(2024, 7, 1, 16, tzinfo=UTC)
    assert fmt_at(winter, ny) == "2024-02-15 17:00:00 EST (UTC-05:00)"
    assert fmt_at(summer, ny) == "2024-07-01 12:00:00 EDT (UTC-04:00)"
