"""``escalation report sla --format html``: the SLA report as one self-contained HTML page.

Rendered by the Jinja2 template ``templates/sla_report.html`` with autoescaping on (every
ladder, tier and figure is escaped; only the charts, built and escaped by
:mod:`escalation.entrypoints.charts`, go in as markup); no script, no external asset.
"""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from escalation.entrypoints import charts
from escalation.service_layer.sla_report import CSV_COLUMNS, SlaReport

_ENV = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                   autoescape=select_autoescape(["html"]), trim_blocks=True,
                   lstrip_blocks=True, keep_trailing_newline=True)


def to_html(report: SlaReport) -> str:
    """The page: the table (one row per ladder and tier, the columns of the CSV output
    :data:`~escalation.service_layer.sla_report.CSV_COLUMNS`, values as the CSV gives them)
    and two charts, escalations per tier (entered, promoted on time, promoted late) and time
    in tier in hours (median, p95)."""
    labels = [f"{f.ladder} / {f.tier}" for f in report.tiers]
    counts = charts.grouped("Escalations per tier", labels, [
        ("entered", "#4e79a7", [float(f.entered) for f in report.tiers]),
        ("promoted on time", "#59a14f", [float(f.promoted_on_time) for f in report.tiers]),
        ("promoted late", "#e15759", [float(f.promoted_late) for f in report.tiers]),
    ])
    times = charts.grouped("Time in tier (hours)", labels, [
        ("median", "#76b7b2", [(f.median_s or 0) / 3600 for f in report.tiers]),
        ("p95", "#f28e2b", [(f.p95_s or 0) / 3600 for f in report.tiers]),
    ])
    rows = [[row.get(c) for c in CSV_COLUMNS] for row in (f.as_row() for f in report.tiers)]
    return _ENV.get_template("sla_report.html").render(
        since=report.since.isoformat(), until=report.until.isoformat(),
        grace_s=report.grace_s, columns=CSV_COLUMNS, rows=rows,
        counts_svg=Markup(counts), times_svg=Markup(times),  # noqa: S704 - escaped by charts
    )
