"""``escalation_decisions_total`` and the firing-lag histogram never fall when retention
removes a ledger partition: the partition's figures are saved in Redis before the removal
commits and added back at scrape time (real PostgreSQL partitions, real Redis)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
import redis
import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.adapters.metrics_queries import decisions
from escalation.adapters.partitions import ExpiryRun, drop_expired, list_partitions
from escalation.adapters.retired_figures import RedisRetiredFigures
from tests.helpers import run_cli
from tests.integration.audit_support import T0, claimed, make_escalation, promote, terminal

SEVEN_YEARS = 2557
OLD = "escalation_audit_y2015m03"


def _old_decisions(engine: sa.Engine, source: str, copies: int, lag_s: int) -> None:
    """``copies`` copies of the decision row of dispute ``source``, as chains created and
    decided in March 2015 (so they land in the expired partition), ``lag_s`` after due."""
    with engine.begin() as conn:
        conn.execute(sa.text("SELECT escalation_audit_ensure_partition('2015-03-01')"))
        conn.execute(sa.text(
            "INSERT INTO escalation_audit SELECT gen_random_uuid(), seq, event,"
            " match_decision, from_tier, to_tier, ladder, ladder_version, calendar_version,"
            " materiality, TIMESTAMPTZ '2015-03-10 12:00+00' - make_interval(secs => :lag),"
            " next_due_at, regulatory_deadline, '2015-03-10 12:00+00', '2015-03-10 12:00+00',"
            " actor, trace_id, source_hash, external_id, fence_token, details, prev_hash,"
            " row_hash, '2015-03-10+00' FROM escalation_audit, generate_series(1, :n)"
            " WHERE dispute_id = CAST(:d AS uuid) AND event IN ('PROMOTED', 'TERMINAL')"),
            {"d": source, "n": copies, "lag": lag_s})


def test_decision_counters_do_not_fall_across_a_partition_drop(
    scratch: sa.Engine, redis_client: redis.Redis, namespace: str,
) -> None:
    store = PostgresAuditStore(scratch)
    young = store.record_enqueue(make_escalation(), "svc", T0)[1]
    store.record_decisions([(claimed(young), promote(young))], "w")
    ended = store.record_enqueue(make_escalation(), "svc", T0)[1]
    store.record_decisions([(claimed(ended), terminal(ended))], "w")
    _old_decisions(scratch, str(young.dispute_id), 3, lag_s=40)
    _old_decisions(scratch, str(ended.dispute_id), 2, lag_s=2)
    retired = RedisRetiredFigures(redis_client, namespace)

    before = decisions(scratch, retired=retired.load)
    assert sum(before.by_kind.values()) == 7
    now = datetime.now(UTC)
    assert drop_expired(scratch, ExpiryRun(now, SEVEN_YEARS, "test"), retired.save).removed == [OLD]
    assert OLD not in {p.name for p in list_partitions(scratch)}

    after = decisions(scratch, retired=retired.load)
    for kind, n in before.by_kind.items():
        assert after.by_kind[kind] >= n
    assert after.by_kind == before.by_kind
    assert after.lag_count == before.lag_count == 7
    assert after.lag_buckets == before.lag_buckets
    assert abs(after.lag_sum_s - before.lag_sum_s) < 1e-6
    # the ledger rows alone did fall: the saved figures are what keeps the counter up
    assert sum(decisions(scratch).by_kind.values()) == 2

    # a removal retried on the same partition overwrites its figures, never adds them twice
    retired.save(OLD, retired.load()[OLD])
    assert decisions(scratch, retired=retired.load).by_kind == before.by_kind
    # a partition saved but still attached (its removal rolled back) counts by its rows only
    young_part = next(iter(list_partitions(scratch))).name
    retired.save(young_part, retired.load()[OLD])
    assert decisions(scratch, retired=retired.load).by_kind == before.by_kind


def test_a_removal_whose_save_fails_keeps_the_partition(
    scratch: sa.Engine, redis_client: redis.Redis, namespace: str,
) -> None:
    store = PostgresAuditStore(scratch)
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    store.record_decisions([(claimed(esc), promote(esc))], "w")
    _old_decisions(scratch, str(esc.dispute_id), 1, lag_s=1)

    def broken(name: str, figures: object) -> None:
        raise redis.ConnectionError("Redis down")

    with pytest.raises(redis.ConnectionError):
        drop_expired(scratch, ExpiryRun(datetime.now(UTC), SEVEN_YEARS, "test"), broken)
    assert OLD in {p.name for p in list_partitions(scratch)}
    assert sum(decisions(scratch).by_kind.values()) == 2


def test_the_drop_expired_command_saves_the_figures_it_removes(
    scratch: sa.Engine, redis_client: redis.Redis, namespace: str, cli_env: dict[str, str],
) -> None:
    store = PostgresAuditStore(scratch)
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    store.record_decisions([(claimed(esc), promote(esc))], "w")
    _old_decisions(scratch, str(esc.dispute_id), 3, lag_s=5)
    before = decisions(scratch)
    env = {**cli_env, "ESCALATION_DATABASE_URL":
           scratch.url.render_as_string(hide_password=False)}
    res = run_cli(env, "audit", "partitions", "drop-expired", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["removed"] == [OLD]
    saved = RedisRetiredFigures(redis_client, namespace).load()
    assert sum(saved[OLD].by_kind.values()) == 3
    after = decisions(scratch, retired=RedisRetiredFigures(redis_client, namespace).load)
    assert after.by_kind == before.by_kind and after.lag_buckets == before.lag_buckets
