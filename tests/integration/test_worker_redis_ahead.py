"""The worker and Redis ahead of the ledger (docs/adr/0014-redis-ahead-of-the-ledger.md), on
real Redis and PostgreSQL: a claim that finds the payload's seq above the ledger's records
nothing and marks the namespace; while the mark is set a worker fires nothing (one ERROR
line with the command to run; a ``--burst`` run raises the one-line error); once the mark is
cleared it fires again."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from escalation.adapters.redis_client import NamespaceBinding
from escalation.bootstrap import reliability_for
from escalation.entrypoints.worker import RedisAheadOfLedger, run_worker
from tests.e2e.helpers import due_requests, enqueue


def _ahead_in_redis(app: Any, dispute_id: Any, seq: int) -> None:
    """What a failover that lost the ledger's last commit leaves: Redis's payload at a seq
    the ledger never recorded (the member still due)."""
    key = reliability_for(app).keys_for(str(dispute_id)).payload(str(dispute_id))
    assert app.redis.hset(key, "seq", str(seq)) == 0  # the field existed


def test_a_claim_ahead_of_the_ledger_records_nothing_and_stops_every_worker(app: Any) -> None:
    now = app.scheduler.time()
    ahead, other = enqueue(app, due_requests(2, now, past_s=60))
    _ahead_in_redis(app, ahead, 2)
    binding = NamespaceBinding(app.redis, app.settings.namespace)
    assert binding.resync() is None

    with pytest.raises(RedisAheadOfLedger, match="escalation reconcile"), \
            capture_logs() as logs:
        run_worker(app, burst=True)
    mark = binding.resync()
    assert mark is not None and mark["reason"] == "ahead_on_claim", mark
    assert str(ahead) in mark["detail"]
    state, _ = app.store.get(ahead)
    assert state.seq == 1  # nothing recorded for the escalation ahead
    refused = [e for e in logs if e["event"] == "worker.redis_ahead"]
    assert len(refused) == 1 and refused[0]["command"] == "escalation reconcile"
    assert refused[0]["log_level"] == "error"


def test_a_marked_namespace_is_not_fired_until_the_mark_is_cleared(app: Any) -> None:
    now = app.scheduler.time()
    (did,) = enqueue(app, due_requests(1, now, past_s=60))
    binding = NamespaceBinding(app.redis, app.settings.namespace)
    binding.mark_resync("restored", "test")

    with capture_logs() as logs:
        totals = run_worker(app, max_batches=3)  # waits a poll interval between passes
    assert totals.claimed == 0 and totals.recorded == 0
    assert app.store.get(did)[0].seq == 1
    assert [e["event"] for e in logs].count("worker.redis_ahead") == 1  # once, not per pass
    assert not any("Traceback" in str(e) for e in logs)

    assert binding.clear_resync() is True
    totals = run_worker(app, burst=True)
    assert totals.recorded == 1
    assert app.store.get(did)[0].seq == 2
