"""``report sla --format html``: the Jinja2 page escapes every ladder and tier name (table and
charts) and shows the figures the CSV output gives; its charts come from the one chart
renderer the console uses (``escalation.entrypoints.charts``)."""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from html.parser import HTMLParser

from escalation.entrypoints import charts
from escalation.entrypoints.sla_html import to_html
from escalation.service_layer.sla_report import CSV_COLUMNS, SlaReport, TierFigures, to_csv

NS = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>alert("x")</script>&amp;'


def _report() -> SlaReport:
    return SlaReport(
        since=datetime(2026, 1, 1, tzinfo=UTC), until=datetime(2026, 2, 1, tzinfo=UTC),
        grace_s=60,
        tiers=[TierFigures(HOSTILE, "standard", entered=7, promoted_on_time=4, promoted_late=2,
                           resolved=1, regulatory_met=3, regulatory_missed=1,
                           durations=[3600.0, 5400.0, 90000.0]),
               TierFigures("reg_e", 'senior "b"', entered=2, promoted_late=1,
                           durations=[7200.0])])


class _Cells(HTMLParser):
    """The text of every ``<td>`` / ``<th>`` of the page's table, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def test_every_name_is_escaped_in_the_table_and_the_charts() -> None:
    page = to_html(_report())
    assert "<script" not in page and "&lt;script&gt;" in page
    assert "&amp;amp;" in page  # the name's own "&amp;" shown as written, not as "&"
    svgs = re.findall(r"<svg .*?</svg>", page, flags=re.S)
    assert len(svgs) == 2
    for svg in svgs:  # well-formed XML: every text escaped
        root = ET.fromstring(svg)  # noqa: S314 - our own generated SVG
        labels = [t.text for t in root.iter(NS + "text")]
        assert f"{HOSTILE} / standard" in labels and 'reg_e / senior "b"' in labels


def test_the_table_shows_the_figures_of_the_csv_output() -> None:
    report = _report()
    parser = _Cells()
    parser.feed(to_html(report))
    csv_rows = list(csv.reader(io.StringIO(to_csv(report), newline="")))
    assert parser.rows == csv_rows  # header and every cell, names included
    assert parser.rows[0] == list(CSV_COLUMNS)
    assert parser.rows[1][2:] == ["7", "4", "2", "6", "1", "5400.000", "90000.000", "3", "1",
                                  "0", "0", "0"]


def test_the_charts_carry_each_figure_in_a_title() -> None:
    page = to_html(_report())
    titles = [t.text for svg in re.findall(r"<svg .*?</svg>", page, flags=re.S)
              for r in ET.fromstring(svg).iter(NS + "rect")  # noqa: S314
              for t in r.iter(NS + "title")]
    name = f"{HOSTILE} / standard"
    assert f"{name}: entered 7" in titles and f"{name}: promoted on time 4" in titles
    assert f"{name}: promoted late 2" in titles
    assert f"{name}: median 1.5" in titles and f"{name}: p95 25" in titles  # hours
    assert 'reg_e / senior "b": median 2' in titles


def test_one_renderer_draws_every_chart_longest_bar_spans_the_chart() -> None:
    svg = charts.grouped("t", ["a", "b"], [("x", "#000", [2.0, 8.0]), ("y", "#111", [4.0, 0.0])])
    widths = [float(w) for w in re.findall(r'<rect x="0.0" y="\d+" width="([\d.]+)"', svg)]
    assert widths == [charts.SPAN * 2 / 8, charts.SPAN * 4 / 8, charts.SPAN, 0.0]
    root = ET.fromstring(svg)  # noqa: S314
    texts = {t.text: float(t.get("y") or 0) for t in root.iter(NS + "text")}
    rects = [float(r.get("y") or 0) for r in root.iter(NS + "rect") if r.find(NS + "title")
             is not None]
    assert texts["a"] < rects[0] < rects[1] < texts["b"] < rects[2] < rects[3]
