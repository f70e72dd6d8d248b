"""Monthly ledger partitions: created ahead idempotently, routed by the chain's creation
time, and removed by retention only when entirely older than the retention period."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.checkpoints import PostgresCheckpoints
from escalation.adapters.partitions import (
    ExpiryRun,
    add_months,
    drop_expired,
    ensure_partitions,
    list_partitions,
    partition_for,
)
from escalation.adapters.tables import PARTITION_SCHEMA
from escalation.domain.errors import InvalidInput
from escalation.service_layer.checkpoint import verify
from tests.integration.audit_support import T0, claimed, make_escalation, promote

SEVEN_YEARS = 2557


def _db_now(engine: sa.Engine) -> datetime:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT now()")).scalar_one().astimezone(UTC)


def test_month_arithmetic_and_partition_ranges():
    assert add_months(date(2026, 12, 1), 1) == date(2027, 1, 1)
    assert add_months(date(2026, 1, 1), -1) == date(2025, 12, 1)
    p = partition_for(datetime(2026, 12, 31, 23, 59, tzinfo=UTC))
    assert p.name == "escalation_audit_y2026m12"
    assert (p.range_from, p.range_to) == (
        datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))


def test_ensure_partitions_creates_ahead_once(scratch):
    now = _db_now(scratch)
    first = ensure_partitions(scratch, now, 6)
    assert [p for p in first] == [partition_for(add_months(partition_for(now).range_from.date(),
                                                          m)).name for m in (4, 5, 6)]
    assert ensure_partitions(scratch, now, 6) == []
    assert len(list_partitions(scratch)) == 7
    with pytest.raises(InvalidInput):
        ensure_partitions(scratch, now, -1)


def test_every_row_of_a_dispute_lands_in_its_creation_month_partition(scratch):
    store = PostgresAuditStore(scratch)
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    # decisions far in the future do not move the chain to another partition
    later = esc.due_at + timedelta(days=400)
    store.record_decisions([(claimed(esc), promote(esc, at=later))], "w")
    with scratch.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT tableoid::regclass::text, seq FROM escalation_audit"
                    " WHERE dispute_id = :d ORDER BY seq"),
            {"d": esc.dispute_id},
        ).all()
    expect = f"{PARTITION_SCHEMA}.{partition_for(_db_now(scratch)).name}"
    assert [r[0] for r in rows] == [expect, expect]


def test_a_retried_decision_is_still_deduplicated(scratch):
    store = PostgresAuditStore(scratch)
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    item = (claimed(esc), promote(esc))
    assert store.record_decisions([item], "w")[0].status.value == "recorded"
    assert store.record_decisions([item], "w")[0].status.value == "stale"
    assert store.record_enqueue(esc.with_changes(seq=0), "svc", T0)[0] is False
    assert len(store.trail(esc.dispute_id)) == 2


def test_drop_expired_removes_only_partitions_entirely_older_than_retention(scratch):
    now = _db_now(scratch)
    with scratch.begin() as conn:
        conn.execute(sa.text("SELECT escalation_audit_ensure_partition('2015-03-01')"))
    store = PostgresAuditStore(scratch)
    store.record_enqueue(make_escalation(), "svc", T0)
    young = partition_for(now).name
    result = drop_expired(scratch, ExpiryRun(now, SEVEN_YEARS, "test",
                                             names=["escalation_audit_y2015m03", young]))
    assert result.removed == ["escalation_audit_y2015m03"]
    assert "after the retention cutoff" in result.refused[young]
    assert "escalation_audit_y2015m03" not in {p.name for p in list_partitions(scratch)}
    with scratch.connect() as conn:
        logged = conn.execute(sa.text("SELECT partition_name, action FROM audit_retention")).all()
    assert logged == [("escalation_audit_y2015m03", "dropped")]
    assert verify(PostgresCheckpoints(scratch)).ok


def test_drop_expired_refuses_an_old_partition_holding_a_young_row(scratch):
    now = _db_now(scratch)
    store = PostgresAuditStore(scratch)
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    with scratch.begin() as conn:
        conn.execute(sa.text("SELECT escalation_audit_ensure_partition('2016-05-01')"))
        # a chain created in 2016 that is still being written to today
        conn.execute(
            sa.text(
                "INSERT INTO escalation_audit SELECT dispute_id, 2, event, match_decision,"
                " from_tier, to_tier, ladder, ladder_version, calendar_version, materiality,"
                " due_at, next_due_at, regulatory_deadline, now(), now(), actor, trace_id,"
                " source_hash, external_id, fence_token, details, prev_hash, row_hash,"
                " '2016-05-10+00' FROM escalation_audit WHERE dispute_id = :d"
            ),
            {"d": esc.dispute_id},
        )
    result = drop_expired(scratch, ExpiryRun(now, SEVEN_YEARS, "test"))
    assert result.removed == []
    refused = drop_expired(scratch, ExpiryRun(now, SEVEN_YEARS, "test",
                                              names=["escalation_audit_y2016m05"])).refused
    assert "younger than the retention cutoff" in refused["escalation_audit_y2016m05"]
    assert "escalation_audit_y2016m05" in {p.name for p in list_partitions(scratch)}
