"""Rich renderings shared by CLI commands."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from escalation.ports import LedgerRow


def trail_table(rows: Sequence[LedgerRow]) -> Table:
    """An audit trail as a table: seq, decision, tiers, due, decided (Redis TIME), actor."""
    first = rows[0]
    table = Table(title=f"audit trail of {first.dispute_id}"
                  + (f" (external id {first.external_id})" if first.external_id else ""))
    for col in ("seq", "event", "match_decision", "from", "to", "ladder", "due_at",
                "next_due_at", "decided_at", "actor", "row_hash"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            str(r.seq), r.event, r.match_decision, r.from_tier or "", r.to_tier or "",
            f"{r.ladder}@{r.ladder_version}",
            r.due_at.isoformat(timespec="seconds") if r.due_at else "",
            r.next_due_at.isoformat(timespec="seconds") if r.next_due_at else "",
            r.decided_at.isoformat(timespec="milliseconds"), r.actor, r.row_hash[:12],
        )
    return table
