"""Rich renderings shared by CLI commands."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich.table import Table

from escalation.ports import LedgerRow


def trail_table(rows: Sequence[LedgerRow]) -> Table:
    """An audit trail as a table: seq, decision, tiers, due, decided (Redis TIME), actor."""
    first = rows[0]
    table = Table(title=f"audit trail of {first.dispute_id}"
                  + (f" (external id {first.external_id})" if first.external_id else ""))
    for col in ("seq", "match_decision", "tiers", "ladder", "due (UTC)", "next due (UTC)",
                "deadline (UTC)", "calendar", "decided (Redis TIME)", "actor", "hash"):
        table.add_column(col, no_wrap=True)
    for r in rows:
        tiers = " -> ".join(t for t in (r.from_tier, r.to_tier) if t)
        table.add_row(
            str(r.seq), r.match_decision, tiers, f"{r.ladder}@{r.ladder_version}",
            _ts(r.due_at), _ts(r.next_due_at), _ts(r.regulatory_deadline),
            r.calendar_version or "",
            r.decided_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3], r.actor, r.row_hash[:10],
        )
    return table


def _ts(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""
