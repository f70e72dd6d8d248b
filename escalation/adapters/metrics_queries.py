"""Read-only PostgreSQL figures for ``/metrics`` (computed at scrape time, so every API worker
answers the same): pending escalations by ladder and tier, decisions by kind with the
due -> decided lag distribution, and regulatory deadlines of open escalations due soon."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import sqlalchemy as sa

LAG_BUCKETS_S: tuple[float, ...] = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
"""Upper bounds (seconds) of the firing-lag histogram buckets (plus +Inf)."""

_PENDING = sa.text(
    "SELECT ladder, tier, count(*) FROM escalation_state WHERE status = 'pending' "
    "GROUP BY ladder, tier ORDER BY ladder, tier"
)

# Deadlines of open (pending or paused) escalations in [now, now + :hours h). Rows written
# before the multi-deadline column carry only regulatory_deadline.
_DEADLINES_SOON = sa.text(
    """
    SELECT name, count(*) FROM (
        SELECT d.value->>0 AS name, CAST(d.value->>1 AS timestamptz) AS at
          FROM escalation_state s, jsonb_array_elements(s.deadlines) AS d
         WHERE s.status IN ('pending', 'paused') AND jsonb_typeof(s.deadlines) = 'array'
        UNION ALL
        SELECT 'regulatory', s.regulatory_deadline
          FROM escalation_state s
         WHERE s.status IN ('pending', 'paused') AND s.regulatory_deadline IS NOT NULL
           AND (s.deadlines IS NULL OR jsonb_array_length(s.deadlines) = 0)
    ) AS x
    WHERE at >= now() AND at < now() + make_interval(hours => :hours)
    GROUP BY name ORDER BY name
    """
)


@dataclass
class DecisionFigures:
    """Counts of PROMOTED/TERMINAL ledger rows by ``match_decision``, and the cumulative
    histogram of ``decided_at - due_at`` in seconds (bucket upper bound -> count)."""

    by_kind: dict[str, int] = field(default_factory=dict)
    lag_buckets: dict[float, int] = field(default_factory=dict)
    lag_count: int = 0
    lag_sum_s: float = 0.0


def pending_by_ladder_tier(engine: sa.Engine) -> list[tuple[str, str, int]]:
    """(ladder, tier, pending escalations), from the projection."""
    with engine.connect() as conn:
        return [(str(a), str(b), int(n)) for a, b, n in conn.execute(_PENDING)]


def decisions(engine: sa.Engine, buckets: Sequence[float] = LAG_BUCKETS_S) -> DecisionFigures:
    """Decision counts by kind and the due -> decided lag histogram (one ledger scan).

    ``decided_at`` is Redis TIME at the claim, so the lag is measured on the one clock.
    """
    cols = ", ".join(
        f"count(*) FILTER (WHERE lag <= {float(b)!r})" for b in buckets
    )
    sql = sa.text(
        f"SELECT match_decision, count(*), coalesce(sum(lag), 0), {cols} FROM ("
        "  SELECT match_decision, GREATEST(0, EXTRACT(EPOCH FROM decided_at - due_at)) AS lag"
        "    FROM escalation_audit WHERE event IN ('PROMOTED', 'TERMINAL')"
        "     AND due_at IS NOT NULL) AS d GROUP BY match_decision ORDER BY match_decision"
    )
    out = DecisionFigures(lag_buckets=dict.fromkeys(buckets, 0))
    with engine.connect() as conn:
        for row in conn.execute(sql):
            kind, n, total = str(row[0]), int(row[1]), float(row[2])
            out.by_kind[kind] = n
            out.lag_count += n
            out.lag_sum_s += total
            for b, c in zip(buckets, row[3:], strict=True):
                out.lag_buckets[b] += int(c)
    return out


def deadlines_due_within(engine: sa.Engine, hours: int = 24) -> dict[str, int]:
    """Regulatory deadlines of open escalations falling in the next ``hours`` hours, by
    deadline name (database clock)."""
    with engine.connect() as conn:
        return {str(n): int(c) for n, c in conn.execute(_DEADLINES_SOON, {"hours": hours})}
