"""`escalation doctor` flags each troubleshooting symptom it is shown (docs/reliability.md)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from escalation.bootstrap import run_doctor
from tests.e2e.helpers import due_requests, enqueue
from tests.helpers import run_cli
from tests.integration import reliability_support as support

own_database_url = support.own_database_url  # fixtures
own_app = support.own_app


def _by_name(app: Any, **kw: Any) -> dict[str, Any]:
    return {c.name: c for c in run_doctor(app, **kw)}


def test_healthy_deployment_passes_every_check(own_app: Any) -> None:
    enqueue(own_app, due_requests(5, own_app.scheduler.time(), past_s=-600))
    checks = _by_name(own_app)
    failed = {n: c.detail for n, c in checks.items() if not c.ok}
    assert failed == {}


def test_stuck_member_and_zset_drift_are_flagged(own_app: Any) -> None:
    (did,) = enqueue(own_app, due_requests(1, own_app.scheduler.time(), past_s=-600))
    keys = own_app.scheduler.keys_for(did)
    own_app.redis.delete(keys.payload(did))  # STUCK_MEMBER
    own_app.redis.zadd(keys.pending, {str(uuid.uuid4()): 1})  # unknown member: drift
    checks = _by_name(own_app)
    assert not checks["STUCK_MEMBER"].ok and "reconcile" in checks["STUCK_MEMBER"].advice
    assert not checks["ZSET_DRIFT"].ok


def test_missing_pending_member_is_zset_drift(own_app: Any) -> None:
    (did,) = enqueue(own_app, due_requests(1, own_app.scheduler.time(), past_s=-600))
    own_app.redis.zrem(own_app.scheduler.keys_for(did).pending, str(did))
    assert not _by_name(own_app)["ZSET_DRIFT"].ok


def test_clock_skew_is_flagged(own_app: Any) -> None:
    checks = _by_name(own_app, host_ms=lambda: time.time_ns() // 1_000_000 + 30_000)
    assert not checks["CLOCK_SKEW"].ok and "NTP" in checks["CLOCK_SKEW"].advice


def test_lock_contention_is_flagged_from_counters(own_app: Any) -> None:
    keys = own_app.scheduler.shard_keys()[0]
    own_app.redis.hincrby(keys.stats, "not_owner", 3)
    assert not _by_name(own_app)["LOCK_CONTENTION"].ok


def test_double_escalation_is_flagged(own_app: Any) -> None:
    import sqlalchemy as sa

    (did,) = enqueue(own_app, due_requests(1, own_app.scheduler.time()))
    from escalation.service_layer.core import CorePorts
    from escalation.service_layer.fire import FireDue, fire_due

    fire_due(
        FireDue(batch_size=10, lease_ms=5000, worker_id="w"),
        CorePorts(scheduler=own_app.scheduler, store=own_app.store, ladders=own_app.ladders,
                  calendars=own_app.calendars),
    )
    # forge a second decision row out of the same tier (what a broken claim would leave)
    with own_app.engine.begin() as conn:
        row = dict(conn.execute(sa.text(
            "SELECT * FROM escalation_audit WHERE dispute_id = :d AND event = 'PROMOTED'"),
            {"d": did}).mappings().one())
        row["seq"] = 99
        row["details"] = "{}"
        cols = ", ".join(row)
        vals = ", ".join(f"CAST(:{c} AS jsonb)" if c == "details" else f":{c}" for c in row)
        conn.execute(sa.text(f"INSERT INTO escalation_audit ({cols}) VALUES ({vals})"), row)
    assert not _by_name(own_app)["DOUBLE_ESCALATION"].ok


def test_doctor_cli_exits_non_zero_when_a_check_fails(
    own_app: Any, own_database_url: str, cli_env: dict[str, str]
) -> None:

    keys = own_app.scheduler.shard_keys()[0]
    own_app.redis.zadd(keys.pending, {"not-a-uuid": 1})
    env = dict(cli_env, ESCALATION_DATABASE_URL=own_database_url,
               ESCALATION_NAMESPACE=own_app.settings.namespace)
    proc = run_cli(env, "doctor")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "STUCK_MEMBER" in proc.stdout and "ZSET_DRIFT" in proc.stdout


def test_a_restore_that_meets_a_workers_lock_is_not_lock_contention(own_app: Any) -> None:
    # A ladder apply (or reconcile) restoring a member a worker holds is answered NOT_OWNER
    # and retried later: expected on a live system. It was counted with the workers'
    # "lease expired mid-flight" and doctor failed LOCK_CONTENTION for good, advising to
    # raise lock_ttl_s. It now has its own counter.
    from escalation.domain.escalation import Status
    from escalation.ports import ApplyOutcome
    from tests.e2e.helpers import due_requests, enqueue

    [did] = enqueue(own_app, due_requests(1, own_app.scheduler.time()))
    esc = own_app.store.get(did)[0]
    assert esc.status is Status.PENDING
    assert own_app.scheduler.claim(10, 30_000, "worker-a")
    assert own_app.scheduler.restore([esc.with_changes(seq=esc.seq + 1)]) == [
        ApplyOutcome.NOT_OWNER]
    stats = own_app.scheduler.stats()
    assert stats.get("restore_held") == 1 and not stats.get("not_owner"), stats
    assert _by_name(own_app)["LOCK_CONTENTION"].ok
