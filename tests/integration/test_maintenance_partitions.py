"""The worker's maintenance keeps ledger partitions created ahead.

See docs/audit.md, "Partitions and retention".
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from escalation.bootstrap import maintenance_for


def test_maintenance_has_a_partition_job_that_creates_the_months_ahead(app: Any) -> None:
    maint = maintenance_for(app)
    jobs = {j.name: j for j in maint.jobs}
    assert {"reconcile", "dead_letter_alerts", "partitions"} <= set(jobs)
    jobs["partitions"].fn()
    again = jobs["partitions"].fn()
    assert again == {"created": []}  # idempotent: everything ahead already exists
    with app.engine.connect() as conn:
        months = conn.execute(sa.text(
            "SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent "
            "WHERE p.relname = 'escalation_audit'")).scalar_one()
    assert months >= 1 + app.settings.audit_partitions_ahead
