"""``maintenance_runs`` in PostgreSQL (Alembic 0005): the per-occurrence compare-and-set
that makes each recurring maintenance job run once per occurrence across workers
(implements ``escalation.ports.MaintenanceRuns``; see ``service_layer.maintenance``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from escalation.domain.timeutil import from_ms
from escalation.ports import OccurrenceClaim

_T = sa.table("maintenance_runs", sa.column("job"), sa.column("last_occurrence"))


def claim_occurrence(
    engine: sa.Engine, job: str, interval_s: int, now_ms: int, actor: str
) -> OccurrenceClaim | None:
    """Claim job ``job``'s current occurrence (``floor(now_ms / interval) * interval``, epoch
    ms) in PostgreSQL (row lock + compare-and-set on ``last_occurrence``).

    Returns:
        the Claim, or None when this occurrence (or a later one) was already claimed.
    """
    interval_ms = interval_s * 1000
    occ = now_ms // interval_ms * interval_ms
    occ_dt = from_ms(occ)
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO maintenance_runs (job, last_occurrence, last_run_at, last_status, "
            "last_leader) VALUES (:job, 'epoch', clock_timestamp(), 'ok', :actor) "
            "ON CONFLICT (job) DO NOTHING"), {"job": job, "actor": actor})
        last: datetime = conn.execute(sa.text(
            "SELECT last_occurrence FROM maintenance_runs WHERE job = :job FOR UPDATE"),
            {"job": job}).scalar_one()
        if last >= occ_dt:
            return None
        last_ms = int(last.timestamp() * 1000)
        missed = 0 if last_ms <= 0 else max(0, (occ - last_ms) // interval_ms - 1)
        conn.execute(sa.text(
            "UPDATE maintenance_runs SET last_occurrence = :occ, last_run_at = clock_timestamp(),"
            " last_status = 'running', missed = missed + :missed, last_leader = :actor "
            "WHERE job = :job"), {"occ": occ_dt, "missed": missed, "actor": actor,
                                  "job": job})
    return OccurrenceClaim(occ, missed)


def finish_run(engine: sa.Engine, job: str, status: str, details: dict[str, Any]) -> None:
    """Record the outcome of a claimed run (``ok`` or ``failed``) and its details."""
    with engine.begin() as conn:
        conn.execute(sa.text(
            "UPDATE maintenance_runs SET runs = runs + 1, last_status = :st, "
            "details = CAST(:d AS jsonb) WHERE job = :job"),
            {"st": status, "d": json.dumps(details, default=str), "job": job})


def runs(engine: sa.Engine) -> list[dict[str, Any]]:
    """Every job's row of ``maintenance_runs`` (for ``maintenance status``)."""
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT * FROM maintenance_runs ORDER BY job")).mappings()
        return [dict(r) for r in rows]


class PostgresMaintenanceRuns:
    """The ``maintenance_runs`` table behind the ``MaintenanceRuns`` port.

    Args:
        engine: a psycopg 3 engine on a database at the Alembic head.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def claim(self, job: str, interval_s: int, now_ms: int, actor: str) -> OccurrenceClaim | None:
        """See :func:`claim_occurrence`."""
        return claim_occurrence(self._engine, job, interval_s, now_ms, actor)

    def finish(self, job: str, status: str, details: dict[str, Any]) -> None:
        """See :func:`finish_run`."""
        finish_run(self._engine, job, status, details)

    def rows(self) -> list[dict[str, Any]]:
        """See :func:`runs`."""
        return runs(self._engine)
