"""Rich renderings shared by CLI commands."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich import box
from rich.table import Table

from escalation.ports import LedgerRow

FULL_TRAIL_WIDTH = 160
"""Columns :func:`trail_table` needs to show every column uncut (instants, seq, decision)."""


def trail_table(rows: Sequence[LedgerRow]) -> Table:
    """An audit trail as a table: seq, decision, tiers, due, decided (Redis TIME), actor."""
    first = rows[0]
    table = Table(title=f"audit trail of {first.dispute_id}"
                  + (f" (external id {first.external_id})" if first.external_id else ""))
    # seq and the instants are never cut (a narrow terminal folds the long text columns
    # instead: the calendar version, the ladder, the actor)
    widths = {"seq": 3, "match_decision": 22, "due (UTC)": 19, "next due (UTC)": 19,
              "deadline (UTC)": 19, "decided (Redis TIME)": 23, "hash": 10}
    for col in ("seq", "match_decision", "tiers", "ladder", "due (UTC)", "next due (UTC)",
                "deadline (UTC)", "calendar", "decided (Redis TIME)", "actor", "hash"):
        if col in widths:
            table.add_column(col, no_wrap=True, min_width=widths[col])
        else:  # tiers, ladder, calendar, actor
            table.add_column(col, overflow="fold", min_width=10)
    for r in rows:
        tiers = " -> ".join(t for t in (r.from_tier, r.to_tier) if t)
        table.add_row(
            str(r.seq), r.match_decision, tiers, f"{r.ladder}@{r.ladder_version}",
            _ts(r.due_at), _ts(r.next_due_at), _ts(r.regulatory_deadline),
            r.calendar_version or "",
            r.decided_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3], r.actor, r.row_hash[:10],
        )
    return table


def compact_trail_table(rows: Sequence[LedgerRow]) -> Table:
    """An audit trail in at most 100 columns: seq, decision, tier reached, due, decided, actor.

    ``escalation audit show`` has the full table (ladder, deadlines, calendar, hashes).
    """
    first = rows[0]
    title = f"audit trail of {first.dispute_id} ({first.ladder}@{first.ladder_version})"
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("seq", "match_decision", "tier", "due (UTC)", "decided (UTC)", "actor"):
        table.add_column(col, no_wrap=True)
    for r in rows:
        table.add_row(
            str(r.seq), r.match_decision, r.to_tier or r.from_tier or "",
            r.due_at.strftime("%m-%d %H:%M:%S") if r.due_at else "",
            r.decided_at.strftime("%H:%M:%S.%f")[:-3], r.actor[:24],
        )
    return table


def _ts(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""


def human_ms(ms: int | float | None) -> str:
    """A duration in milliseconds as people read it: ``"850 ms"``, ``"42 s"``,
    ``"12 min 5 s"``, ``"3 h 12 min"``, ``"2 d 4 h"``; ``"-"`` for None. Negative values
    get a leading ``-``."""
    if ms is None:
        return "-"
    sign, value = ("-" if ms < 0 else ""), abs(int(ms))
    if value < 1000:
        return f"{sign}{value} ms"
    seconds = value // 1000
    units = (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1))
    parts: list[str] = []
    for name, size in units:
        count, seconds = divmod(seconds, size)
        if count or parts:
            parts.append(f"{count} {name}")
        if len(parts) == 2:
            break
    if parts[-1].startswith("0 "):
        parts.pop()
    return sign + " ".join(parts)


def figure_row(name: str, value: object) -> tuple[str, str]:
    """(label, text) of one ``status`` figure: ``*_ms`` figures in human units."""
    if name.endswith("_ms") and (value is None or isinstance(value, int | float)):
        return name.removesuffix("_ms"), human_ms(value)
    return name, str(value)
