"""Read-only PostgreSQL figures for ``/metrics`` (computed at scrape time, so every API worker
answers the same): pending escalations by ladder and tier, decisions by kind with the
due -> decided lag distribution (plus the figures retention saved for removed partitions, so
the counters never fall), and regulatory deadlines of open escalations due soon."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import sqlalchemy as sa

from escalation.ports import LAG_BUCKETS_S, DecisionFigures

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


def pending_by_ladder_tier(engine: sa.Engine) -> list[tuple[str, str, int]]:
    """(ladder, tier, pending escalations), from the projection."""
    with engine.connect() as conn:
        return [(str(a), str(b), int(n)) for a, b, n in conn.execute(_PENDING)]


def decisions_in(conn: sa.Connection, table: str = "escalation_audit",
                 buckets: Sequence[float] = LAG_BUCKETS_S) -> DecisionFigures:
    """Decision counts by kind and the due -> decided lag histogram of the PROMOTED/TERMINAL
    rows of ``table`` (the ledger, or one of its partitions, schema-qualified and quoted by
    the caller; never user input), read on ``conn``.

    ``decided_at`` is Redis TIME at the claim, so the lag is measured on the one clock.
    """
    cols = ", ".join(
        f"count(*) FILTER (WHERE lag <= {float(b)!r})" for b in buckets
    )
    sql = sa.text(
        f"SELECT match_decision, count(*), coalesce(sum(lag), 0), {cols} FROM ("
        "  SELECT match_decision, GREATEST(0, EXTRACT(EPOCH FROM decided_at - due_at)) AS lag"
        f"    FROM {table} WHERE event IN ('PROMOTED', 'TERMINAL')"
        "     AND due_at IS NOT NULL) AS d GROUP BY match_decision ORDER BY match_decision"
    )
    out = DecisionFigures(lag_buckets=dict.fromkeys(buckets, 0))
    for row in conn.execute(sql):
        kind, n, total = str(row[0]), int(row[1]), float(row[2])
        out.by_kind[kind] = n
        out.lag_count += n
        out.lag_sum_s += total
        for b, c in zip(buckets, row[3:], strict=True):
            out.lag_buckets[b] += int(c)
    return out


def add_figures(into: DecisionFigures, other: DecisionFigures) -> None:
    """Add ``other``'s counts, lag sum and buckets to ``into`` (in place); a bucket bound
    ``into`` lacks is ignored (both normally use :data:`LAG_BUCKETS_S`)."""
    for kind, n in other.by_kind.items():
        into.by_kind[kind] = into.by_kind.get(kind, 0) + n
    into.lag_count += other.lag_count
    into.lag_sum_s += other.lag_sum_s
    for b, c in other.lag_buckets.items():
        if b in into.lag_buckets:
            into.lag_buckets[b] += c


_ATTACHED = sa.text(
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
    " WHERE i.inhparent = 'escalation_audit'::regclass"
)


def decisions(engine: sa.Engine, buckets: Sequence[float] = LAG_BUCKETS_S, *,
              retired: Callable[[], Mapping[str, DecisionFigures]] | None = None,
              ) -> DecisionFigures:
    """Decision counts by kind and the due -> decided lag histogram, monotonic across
    retention.

    The figures of the ledger rows still attached, plus, from ``retired()`` (partition name
    -> figures saved when retention removed it), those of every partition no longer attached.
    Ledger rows and the attached partitions are read in one REPEATABLE READ snapshot, and
    ``retired()`` is called after it is taken: retention saves a partition's figures before
    its removal commits, so a partition is counted either by its rows or by its saved figures,
    never by both and never by neither. A partition whose removal failed after the save is
    still attached and counted by its rows only.
    """
    with engine.connect() as plain:
        conn = plain.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            attached = set(conn.execute(_ATTACHED).scalars())
            out = decisions_in(conn, buckets=buckets)
            saved = dict(retired()) if retired is not None else {}
    for name, figs in sorted(saved.items()):
        if name not in attached:
            add_figures(out, figs)
    return out


def deadlines_due_within(engine: sa.Engine, hours: int = 24) -> dict[str, int]:
    """Regulatory deadlines of open escalations falling in the next ``hours`` hours, by
    deadline name (database clock)."""
    with engine.connect() as conn:
        return {str(n): int(c) for n, c in conn.execute(_DEADLINES_SOON, {"hours": hours})}


class PostgresMetricsFigures:
    """``ports.MetricsFigures`` on ``engine``; ``retired()`` gives the figures retention
    saved for removed partitions (``retired_figures.RedisRetiredFigures.load``)."""

    def __init__(self, engine: sa.Engine,
                 retired: Callable[[], Mapping[str, DecisionFigures]] | None = None) -> None:
        self._engine = engine
        self._retired = retired

    def pending_by_ladder_tier(self) -> list[tuple[str, str, int]]:
        """(ladder, tier, pending escalations), from the projection."""
        return pending_by_ladder_tier(self._engine)

    def decisions(self) -> DecisionFigures:
        """Decision figures of the attached rows plus the retired partitions' (monotonic)."""
        return decisions(self._engine, retired=self._retired)

    def deadlines_due_within(self, hours: int) -> dict[str, int]:
        """Regulatory deadlines of open escalations in the next ``hours`` hours, by name."""
        return deadlines_due_within(self._engine, hours)
