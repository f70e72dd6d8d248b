"""/metrics of the API (read from Redis and PostgreSQL) and of a worker (--metrics-port),
scraped before and after a drain: the counts move by exactly what the drain did."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
from prometheus_client.parser import text_string_to_metric_families

from escalation.bootstrap import build
from escalation.entrypoints.worker import run_worker
from escalation.entrypoints.worker_metrics import WorkerMetrics
from escalation.ports import ApplyAction, ApplyOp
from escalation.settings import get_settings
from tests.api.conftest import body, free_port

N = 12


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape(client: httpx.Client) -> dict:
    r = client.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return samples(r.text)


def val(m: dict, name: str, **labels: str) -> float:
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_after_a_drain(api_server, service, compliance, redis_url, database_url):
    with api_server.client(None) as anon:
        assert anon.get("/metrics").status_code == 401
    assert service.get("/metrics").status_code == 403
    now = datetime.now(UTC)
    due = [body(due_at=(now - timedelta(seconds=30)).isoformat(), tier="standard")
           for _ in range(N)]
    later = [body(tier="standard") for _ in range(3)]
    assert service.post("/v1/escalations/batch", json={"items": due + later}).status_code == 200
    before = scrape(compliance)
    assert val(before, "escalation_due_now") == N
    assert val(before, "escalation_oldest_overdue_age_seconds") >= 25

    settings = get_settings(redis_url=redis_url, database_url=database_url,
                            namespace=api_server.namespace, lock_ttl_s=5, poll_interval_s=1)
    app = build(settings, actor="metrics-worker")
    try:
        # one member claimed and abandoned with a 50 ms lease: the drain re-claims it
        stolen = app.scheduler.claim(1, 50, "crashed-worker")
        assert len(stolen.items) == 1
        # writes refused (neither touches the lease): an already-applied seq, then a
        # fencing token nobody holds
        probe = stolen.items[0]
        assert app.scheduler.apply([ApplyOp(probe.escalation, ApplyAction.RESCHEDULE,
                                            probe.token + 10_000)])[0].value == "stale_seq"
        newer = probe.escalation.with_changes(seq=probe.escalation.seq + 1)
        assert app.scheduler.apply([ApplyOp(newer, ApplyAction.RESCHEDULE,
                                            probe.token + 10_000)])[0].value == "not_owner"
        time.sleep(0.2)
        wm = WorkerMetrics()
        totals = run_worker(app, burst=True, metrics=wm)
        assert totals.recorded == N
        port = free_port()
        wm.serve(port)
        worker = samples(httpx.get(f"http://127.0.0.1:{port}/metrics").text)
    finally:
        app.close()
    assert val(worker, "escalation_worker_decisions_total", kind="PROMOTED_TO_SENIOR") == N
    assert val(worker, "escalation_worker_firing_lag_seconds_count") == N
    assert val(worker, "escalation_worker_firing_lag_seconds_bucket", le="10.0") == 0
    assert val(worker, "escalation_worker_firing_lag_seconds_bucket", le="3600.0") == N
    assert val(worker, "escalation_worker_lease_expiries_total") == 1

    after = scrape(compliance)
    assert val(after, "escalation_due_now") == 0
    assert val(after, "escalation_oldest_overdue_age_seconds") == 0
    kind = {"kind": "PROMOTED_TO_SENIOR"}
    assert (val(after, "escalation_decisions_total", **kind)
            - val(before, "escalation_decisions_total", **kind)) == N
    assert (val(after, "escalation_firing_lag_seconds_count")
            - val(before, "escalation_firing_lag_seconds_count")) == N
    std = {"ladder": "dispute_review", "tier": "standard"}
    sen = {"ladder": "dispute_review", "tier": "senior"}
    assert val(before, "escalation_pending", **std) - val(after, "escalation_pending", **std) == N
    assert val(after, "escalation_pending", **sen) - val(before, "escalation_pending", **sen) == N
    assert val(after, "escalation_lease_expiries_total") == 1
    assert val(after, "escalation_stale_writes_refused_total", reason="not_owner") == 1
    assert val(after, "escalation_stale_writes_refused_total", reason="stale_seq") == 1
    assert ("escalation_dead_letters", ()) in after
    assert ("escalation_notifications_total", (("outcome", "delivered"),)) in after


def test_regulatory_deadlines_due_in_24h(service, compliance):
    name = {"deadline": "company_response"}
    before = val(scrape(compliance), "escalation_regulatory_deadlines_due_24h", **name)
    now = datetime.now(UTC)
    b = body(ladder="cfpb_complaint_response", tier=None, due_at=None,
             opened_at=now.isoformat(),
             notice_at=(now - timedelta(days=14, hours=12)).isoformat(),
             dispute_id=str(uuid.uuid4()))
    r = service.post("/v1/escalations", json=b)
    assert r.status_code == 201, r.text
    soon = next(d for d in r.json()["deadlines"] if d["name"] == "company_response")
    at = datetime.fromisoformat(soon["at"])
    expected = 1 if now <= at < now + timedelta(hours=24) else 0
    after = val(scrape(compliance), "escalation_regulatory_deadlines_due_24h", **name)
    assert after - before == expected == 1
