"""Server-side SVG charts of the console (no script, no external asset).

Labels sit above their bars (never under them), values after the bar; every chart has a
``<title>`` and ``aria-label``, and every bar a ``<title>`` with its exact figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

WIDTH = 760
MET, MISSED = "#2e7d32", "#c62828"
BUCKETS: tuple[tuple[str, float], ...] = (
    ("< 1 h", 3600), ("1-4 h", 4 * 3600), ("4-24 h", 86400), ("1-2 d", 2 * 86400),
    ("2-5 d", 5 * 86400), ("5-10 d", 10 * 86400), ("10 d +", float("inf")),
)
BUCKET_COLOURS = ("#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c",
                  "#08306b")


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


def _svg(title: str, height: int, parts: list[str]) -> str:
    t = escape(title)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
            f'width="{WIDTH}" height="{height}" role="img" aria-label="{t}">'
            f"<title>{t}</title>{''.join(parts)}</svg>")


def met_missed(title: str, rows: Sequence[tuple[str, int, int]]) -> str:
    """Stacked horizontal bars: per label, met (green) then missed (red) deadlines."""
    top = max([m + x for _l, m, x in rows] or [1]) or 1
    span = WIDTH - 120
    parts: list[str] = []
    y = 10
    for label, met, missed in rows:
        parts.append(f'<text x="0" y="{y + 11}" font-size="13">{escape(label)}</text>')
        w_met = span * met / top
        w_missed = span * missed / top
        parts.append(f'<rect x="0" y="{y + 16}" width="{w_met:.1f}" height="16" fill="{MET}">'
                     f"<title>{escape(label)}: {met} met</title></rect>")
        parts.append(f'<rect x="{w_met:.1f}" y="{y + 16}" width="{w_missed:.1f}" height="16" '
                     f'fill="{MISSED}"><title>{escape(label)}: {missed} missed</title></rect>')
        parts.append(f'<text x="{w_met + w_missed + 6:.1f}" y="{y + 29}" font-size="12">'
                     f"{met} met, {missed} missed</text>")
        y += 42
    legend = y + 6
    parts.append(f'<rect x="0" y="{legend}" width="12" height="12" fill="{MET}"/>'
                 f'<text x="18" y="{legend + 11}" font-size="12">met</text>'
                 f'<rect x="70" y="{legend}" width="12" height="12" fill="{MISSED}"/>'
                 f'<text x="88" y="{legend + 11}" font-size="12">missed</text>')
    return _svg(title, legend + 20, parts)


def distribution(title: str, rows: Sequence[tuple[str, list[int]]]) -> str:
    """Per label, a 100 % stacked bar of the counts in each of :data:`BUCKETS`."""
    span = WIDTH - 120
    parts: list[str] = []
    y = 10
    for label, counts in rows:
        total = sum(counts)
        parts.append(f'<text x="0" y="{y + 11}" font-size="13">{escape(label)} '
                     f"({total} stays)</text>")
        x = 0.0
        for (bucket, _u), colour, n in zip(BUCKETS, BUCKET_COLOURS, counts, strict=True):
            if not n:
                continue
            w = span * n / total
            parts.append(f'<rect x="{x:.1f}" y="{y + 16}" width="{w:.1f}" height="16" '
                         f'fill="{colour}"><title>{escape(label)}: {n} stays of {bucket}'
                         f"</title></rect>")
            x += w
        y += 42
    legend = y + 6
    for i, ((bucket, _u), colour) in enumerate(zip(BUCKETS, BUCKET_COLOURS, strict=True)):
        lx = i * 92
        parts.append(f'<rect x="{lx}" y="{legend}" width="12" height="12" fill="{colour}"/>'
                     f'<text x="{lx + 16}" y="{legend + 11}" font-size="12">{bucket}</text>')
    return _svg(title, legend + 20, parts)
