"""Server-side SVG bar charts: the console's and ``report sla --format html``'s (no script, no
external asset).

One renderer (:func:`bar_chart`) draws every chart: per row a label, then one or more bars
of stacked segments. Labels sit above their bars (never under them), an optional value after
each bar; every chart has a ``<title>`` and ``aria-label``, and every segment a ``<title>``
with its exact figure. Every text is XML-escaped here (the charts are inserted into pages
as markup).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH = 760
SPAN = WIDTH - 120
"""Width of a bar at the chart's largest value (the rest holds the value after it)."""
MET, MISSED = "#2e7d32", "#c62828"
BUCKETS: tuple[tuple[str, float], ...] = (
    ("< 1 h", 3600), ("1-4 h", 4 * 3600), ("4-24 h", 86400), ("1-2 d", 2 * 86400),
    ("2-5 d", 5 * 86400), ("5-10 d", 10 * 86400), ("10 d +", float("inf")),
)
BUCKET_COLOURS = ("#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c",
                  "#08306b")
BAR_H = 16
BAR_GAP = 4
EM_PER_CHAR = 0.65
"""Width of one character in em that a text is given room for: above the average advance
of sans-serif digits and lower-case letters (DejaVu Sans, Debian's default, draws digits
0.64 em wide), so that a label never runs past the chart's edge."""


def text_width(text: str, font_px: float) -> float:
    """Room (px, in the chart's own units) given to ``text`` drawn at ``font_px``."""
    return len(text) * font_px * EM_PER_CHAR


@dataclass(frozen=True, slots=True)
class Segment:
    """One stacked part of a bar: its length in the chart's unit, colour and exact figure
    (the segment's ``<title>``)."""

    value: float
    colour: str
    title: str


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar: its segments left to right and the text after it ("" for none)."""

    segments: Sequence[Segment]
    after: str = ""


@dataclass(frozen=True, slots=True)
class Row:
    """A label (drawn above) and the bars under it."""

    label: str
    bars: Sequence[Bar]


def bar_chart(title: str, rows: Sequence[Row], legend: Sequence[tuple[str, str]],
              legend_step: int, scale: float | None = None) -> str:
    """The one chart renderer: ``rows`` top to bottom, each bar's segments stacked; a segment
    of value v is ``span * v / scale`` wide (``scale`` None: the largest bar total, so the
    longest bar spans ``span``); ``legend``: (name, colour) boxes every ``legend_step``
    pixels. ``span`` is :data:`SPAN`, less what the longest text after a bar needs beyond
    the room :data:`WIDTH` leaves for it; the chart is made wider than :data:`WIDTH` for a
    row label or legend that needs it, so no text is cut at the edge (the page scales the
    SVG to its column). Returns an ``<svg>`` element (text, XML-escaped)."""
    top = scale if scale is not None else max(
        [sum(s.value for s in b.segments) for r in rows for b in r.bars] or [1]) or 1
    after_w = max([text_width(b.after, 12) for r in rows for b in r.bars if b.after] or [0])
    span = min(SPAN, WIDTH - 6 - after_w - 4)
    width = max([WIDTH, *(text_width(r.label, 13) + 4 for r in rows),
                 *(i * legend_step + 16 + text_width(name, 12) + 4
                   for i, (name, _c) in enumerate(legend))])
    parts: list[str] = []
    y = 10
    for row in rows:
        parts.append(f'<text x="0" y="{y + 11}" font-size="13">{escape(row.label)}</text>')
        bar_y = y + 16
        for bar in row.bars:
            x = 0.0
            for seg in bar.segments:
                w = span * seg.value / top if top else 0.0
                parts.append(f'<rect x="{x:.1f}" y="{bar_y}" width="{w:.1f}" height="{BAR_H}" '
                             f'fill="{seg.colour}"><title>{escape(seg.title)}</title></rect>')
                x += w
            if bar.after:
                parts.append(f'<text x="{x + 6:.1f}" y="{bar_y + 13}" font-size="12">'
                             f"{escape(bar.after)}</text>")
            bar_y += BAR_H + BAR_GAP
        y = bar_y + 6  # one bar: 42 px per row
    legend_y = y + 6
    for i, (name, colour) in enumerate(legend):
        lx = i * legend_step
        parts.append(f'<rect x="{lx}" y="{legend_y}" width="12" height="12" fill="{colour}"/>'
                     f'<text x="{lx + 16}" y="{legend_y + 11}" font-size="12">'
                     f"{escape(name)}</text>")
    height = legend_y + 20
    t = escape(title)
    w_px = str(math.ceil(width))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w_px} {height}" '
            f'width="{w_px}" height="{height}" role="img" aria-label="{t}">'
            f"<title>{t}</title>{''.join(parts)}</svg>")


def bucket_counts(durations_s: Sequence[float]) -> list[int]:
    """How many of ``durations_s`` (seconds) fall in each of :data:`BUCKETS`
    (upper bounds exclusive)."""
    counts = [0] * len(BUCKETS)
    for d in durations_s:
        for i, (_label, upper) in enumerate(BUCKETS):
            if d < upper:
                counts[i] += 1
                break
    return counts


def met_missed(title: str, rows: Sequence[tuple[str, int, int]]) -> str:
    """Stacked horizontal bars: per label, met (green) then missed (red) deadlines."""
    return bar_chart(title, [
        Row(label, [Bar([Segment(met, MET, f"{label}: {met} met"),
                         Segment(missed, MISSED, f"{label}: {missed} missed")],
                        f"{met} met, {missed} missed")])
        for label, met, missed in rows
    ], [("met", MET), ("missed", MISSED)], legend_step=70)


def distribution(title: str, rows: Sequence[tuple[str, list[int]]]) -> str:
    """Per label, a 100 % stacked bar of the counts in each of :data:`BUCKETS`."""
    chart_rows = []
    for label, counts in rows:
        total = sum(counts)
        share = [Segment(n / total if total else 0.0, colour,
                         f"{label}: {n} stays of {bucket}")
                 for (bucket, _u), colour, n in zip(BUCKETS, BUCKET_COLOURS, counts,
                                                    strict=True) if n]
        chart_rows.append(Row(f"{label} ({total} stays)", [Bar(share)]))
    legend = [(bucket, colour) for (bucket, _u), colour in zip(BUCKETS, BUCKET_COLOURS,
                                                               strict=True)]
    return bar_chart(title, chart_rows, legend, legend_step=92, scale=1.0)


def grouped(title: str, labels: Sequence[str],
            series: Sequence[tuple[str, str, Sequence[float]]]) -> str:
    """Per label, one bar per series (name, colour, one value per label), all on one scale;
    the value (``:g``) after each bar."""
    return bar_chart(title, [
        Row(label, [Bar([Segment(values[i], colour, f"{label}: {name} {values[i]:g}")],
                        f"{values[i]:g}")
                    for name, colour, values in series])
        for i, label in enumerate(labels)
    ], [(name, colour) for name, colour, _v in series], legend_step=150)


def percent(good: int, total: int) -> str:
    """``good`` of ``total`` as a percentage to one decimal (``87.5 %``); the counts are
    shown beside it, so the figure is never only the rounded one."""
    return f"{100 * good / total:.1f} %"


def achievement(title: str, lines: Sequence[tuple[str, Sequence[tuple[str, int, int]]]],
                names: tuple[str, str]) -> str:
    """An achievement trend: per line (its label above), one bar per span (oldest first),
    100 % stacked: the share achieved (green, ``names[0]``) then not (red, ``names[1]``) of
    what was decided in the span; after each bar the span's name, the rate and the counts
    (``2024-02-05: 87.5 % (7 of 8)``), or ``none decided``. ``lines``: (label, [(span name,
    achieved, not achieved), ...])."""
    rows = []
    for label, cells in lines:
        bars = []
        for span, good, bad in cells:
            total = good + bad
            if not total:
                bars.append(Bar([], f"{span}: none decided"))
                continue
            bars.append(Bar([Segment(good / total, MET, f"{label}, {span}: {good} {names[0]}"),
                             Segment(bad / total, MISSED, f"{label}, {span}: {bad} {names[1]}")],
                            f"{span}: {percent(good, total)} ({good} of {total})"))
        rows.append(Row(label, bars))
    return bar_chart(title, rows, [(names[0], MET), (names[1], MISSED)], legend_step=100,
                     scale=1.0)
