"""Query parameters a route does not declare are refused (422 problem naming them and
listing the accepted ones), against a real uvicorn server: a misspelt filter such as
``/v1/audit?dispute=<id>`` must never answer the whole ledger as if it were the filtered
one."""

from __future__ import annotations

import uuid

from tests.api.conftest import body

PROBLEM = "application/problem+json"
AUDIT_PARAMS = ["dispute_id", "source", "external_id", "tier", "decision", "from", "to",
                "actor", "ladder", "ladder_version", "limit", "cursor"]


def _refused(r, *names):
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == PROBLEM
    doc = r.json()
    assert doc["type"] == "/problems/invalid-input"
    assert [e["field"] for e in doc["errors"]] == list(names), doc
    return doc


def test_audit_search_refuses_a_misspelt_filter_instead_of_answering_everything(service,
                                                                               compliance):
    b = body()
    assert service.post("/v1/escalations", json=b).status_code == 201
    did = b["dispute_id"]
    for wrong in ("dispute", "disputeId"):
        doc = _refused(compliance.get("/v1/audit", params={wrong: did}), wrong)
        assert doc["accepted"] == AUDIT_PARAMS
        message = doc["errors"][0]["message"]
        assert message == f"unknown query parameter {wrong!r} (did you mean dispute_id?)"
        assert "GET /v1/audit accepts only: dispute_id, source, external_id" in doc["detail"]
    # the declared name filters, as before
    ok = compliance.get("/v1/audit", params={"dispute_id": did})
    assert ok.status_code == 200, ok.text
    assert {row["dispute_id"] for row in ok.json()["rows"]} == {did}
    # every unknown one is named, declared ones beside them do not hide them
    doc = _refused(compliance.get("/v1/audit", params={"dispute_id": did, "limt": 5,
                                                       "zzz": 1}), "limt", "zzz")
    assert "did you mean limit?" in doc["errors"][0]["message"]
    assert doc["errors"][1]["message"] == "unknown query parameter 'zzz'"


def test_a_one_value_parameter_given_twice_is_refused(compliance):
    a, b = uuid.uuid4(), uuid.uuid4()
    r = compliance.get(f"/v1/audit?dispute_id={a}&dispute_id={b}")
    doc = _refused(r, "dispute_id")
    assert "given more than once" in doc["errors"][0]["message"]


def test_escalation_routes_take_no_query_parameters(service, engine):
    ext = f"Q-{uuid.uuid4().hex[:8]}"
    b = body(dispute_id=None, source="cfpb", external_id=ext)
    created = service.post("/v1/escalations", json=b)
    assert created.status_code == 201, created.text
    did = created.json()["dispute_id"]
    for path in (f"/v1/escalations/{did}", f"/v1/sources/cfpb/escalations/{ext}"):
        assert service.get(path).status_code == 200
        doc = _refused(service.get(path, params={"verbose": "1"}), "verbose")
        assert doc["accepted"] == []
        assert doc["detail"].endswith("accepts no query parameters")
    # a write with an ignored parameter would record something else than was asked for
    _refused(service.post(f"/v1/escalations/{did}/cancel", params={"reason": "duplicate"}),
             "reason")
    _refused(service.post("/v1/escalations", params={"dry_run": "1"}, json=body()),
             "dry_run")
    assert service.get(f"/v1/escalations/{did}").json()["status"] == "pending"
    from escalation.adapters.audit_store import PostgresAuditStore

    assert [r.event for r in PostgresAuditStore(engine).trail(uuid.UUID(did))] == ["ENQUEUED"]


def test_other_get_routes_refuse_them_too_and_declared_ones_still_work(api_server,
                                                                        compliance, admin):
    window = {"from": "2000-01-01T00:00:00Z", "to": "2100-01-01T00:00:00Z"}
    assert compliance.get("/v1/reports/sla", params={**window, "grace_s": 30}).status_code \
        == 200
    doc = _refused(compliance.get("/v1/reports/sla", params={**window, "grace": 30}), "grace")
    assert doc["accepted"] == ["from", "to", "grace_s"]
    assert "did you mean grace_s?" in doc["errors"][0]["message"]
    for client, path in ((compliance, "/v1/ladders"),
                         (compliance, "/v1/ladders/dispute_review/versions/1"),
                         (compliance, "/metrics")):
        assert client.get(path).status_code == 200, path
        _refused(client.get(path, params={"x": "1"}), "x")
    with api_server.client(None) as anon:
        assert anon.get("/healthz").status_code == 200
        # a health probe's query string (cache busting) is not a filter: still 200, and a
        # HEAD probe gets 200 too (it was 422 and 405: a load balancer marked it down)
        for probe in ("/healthz", "/livez"):
            assert anon.get(probe, params={"probe": "1"}).json() == {"status": "ok"}
            head = anon.head(probe, params={"t": "123"})
            assert head.status_code == 200 and head.content == b""
        assert anon.get("/readyz", params={"probe": "1"}).json() == {"status": "ready"}
        # the console reads its own form fields: not subject to the API's rule
        assert anon.get("/console/login", params={"next": "/console"}).status_code == 200
    assert admin.get("/readyz", params={"x": "1"}).json()["status"] == "ready"
