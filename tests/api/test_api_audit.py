"""Audit trail, audit search with cursor pages, ladders and the SLA report over HTTP."""

from __future__ import annotations

import uuid

from tests.api.conftest import body


def test_trail_by_both_addresses_and_roles(api_server, service, compliance, admin):
    ext = f"T-{uuid.uuid4().hex[:6]}"
    did = service.post("/v1/escalations", json=body(dispute_id=None, source="acme",
                                                     external_id=ext)).json()["dispute_id"]
    service.post(f"/v1/escalations/{did}/pause")
    by_id = compliance.get(f"/v1/escalations/{did}/audit")
    by_ext = admin.get(f"/v1/sources/acme/escalations/{ext}/audit")
    assert by_id.status_code == by_ext.status_code == 200
    assert by_id.json() == by_ext.json()
    rows = by_id.json()
    assert [r["event"] for r in rows] == ["ENQUEUED", "PAUSED"]
    assert rows[0]["actor"] == api_server.names["service"]
    assert rows[0]["materiality"] == "125.50"
    assert rows[0]["decided_at"].endswith("Z")
    assert service.get(f"/v1/escalations/{did}/audit").status_code == 403
    assert compliance.get(f"/v1/escalations/{uuid.uuid4()}/audit").status_code == 404


def test_search_pages_with_a_cursor_return_every_row_once(api_server, service, compliance):
    items = [body() for _ in range(23)]
    assert service.post("/v1/escalations/batch", json={"items": items}).status_code == 200
    ids = {b["dispute_id"] for b in items}
    seen: list[tuple[str, int]] = []
    cursor = None
    pages = 0
    while True:
        params = {"actor": api_server.names["service"], "decision": "ENQUEUED", "limit": 5}
        if cursor:
            params["cursor"] = cursor
        r = compliance.get("/v1/audit", params=params)
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(page["rows"]) <= 5
        seen += [(row["dispute_id"], row["seq"]) for row in page["rows"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen))
    assert ids <= {d for d, _ in seen}
    assert pages >= 5
    one = compliance.get("/v1/audit", params={"dispute_id": items[0]["dispute_id"]}).json()
    assert [r["event"] for r in one["rows"]] == ["ENQUEUED"]


def test_search_refuses_bad_parameters(compliance, service):
    for params, field in [({"cursor": "garbage!"}, "cursor"), ({"limit": 0}, "limit"),
                          ({"limit": "x"}, "limit"), ({"decision": "NOPE"}, "decision"),
                          ({"tier": "nope"}, "tier"),  # was 200 with no rows
                          ({"from": "2026-01-02T00:00:00"}, "from"),
                          ({"from": "2026-02-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"},
                           "from"),
                          ({"dispute_id": "nope"}, "dispute_id"),
                          ({"source": "acme"}, "source")]:
        r = compliance.get("/v1/audit", params=params)
        assert r.status_code == 422, (params, r.text)
        assert r.json()["errors"][0]["field"] == field, (params, r.json())
    assert service.get("/v1/audit").status_code == 403


def test_every_bad_query_parameter_is_named_by_its_api_name(compliance):
    """``errors[].field`` is the query parameter at fault, and no message names a CLI flag
    (``--from``): the API's words are its own parameters'."""
    late, early = "2026-02-01T00:00:00Z", "2026-01-01T00:00:00Z"
    cases = [
        ("/v1/audit", {"from": late, "to": early}, "from",
         "from (2026-02-01T00:00:00+00:00) is after to (2026-01-01T00:00:00+00:00)"),
        ("/v1/audit", {"to": "yesterday"}, "to", "not an ISO-8601 time"),
        ("/v1/audit", {"ladder_version": 0}, "ladder_version", "must be 1.."),
        ("/v1/audit", {"ladder_version": "x"}, "ladder_version", None),
        ("/v1/audit", {"limit": 1001}, "limit", "limit must be 1-1000, got 1001"),
        ("/v1/audit", {"cursor": "x"}, "cursor", "cursor is malformed"),
        ("/v1/audit", {"tier": "a\x00b"}, "tier", None),
        ("/v1/audit", {"actor": "a\nb"}, "actor", None),
        ("/v1/reports/sla", {"from": late, "to": early}, "from",
         "from (2026-02-01T00:00:00+00:00) must be before to (2026-01-01T00:00:00+00:00)"),
        ("/v1/reports/sla", {"from": late, "to": late}, "from", "must be before to"),
        ("/v1/reports/sla", {"from": early, "to": late, "grace_s": -1}, "grace_s",
         "grace_s must be 0-86400, got -1"),
        ("/v1/reports/sla", {"from": early, "to": late, "grace_s": 86_401}, "grace_s",
         "grace_s must be 0-86400"),
        ("/v1/reports/sla", {"from": early, "to": late, "grace_s": "soon"}, "grace_s", None),
        ("/v1/reports/sla", {"to": late}, "from", None),
    ]
    for path, params, field, message in cases:
        r = compliance.get(path, params=params)
        assert r.status_code == 422, (path, params, r.text)
        doc = r.json()
        assert [e["field"] for e in doc["errors"]] == [field], (path, params, doc)
        assert "--" not in doc["detail"], doc
        if message is not None:
            assert message in doc["errors"][0]["message"], doc


def test_ladders_and_versions(compliance):
    doc = compliance.get("/v1/ladders").json()
    names = {lad["name"]: lad for lad in doc["ladders"]}
    assert names["cfpb_complaint_response"]["versions"] == [1, 2, 3, 4]
    v2 = compliance.get("/v1/ladders/cfpb_complaint_response/versions/2").json()
    assert v2["version"] == 2 and len(v2["deadlines"]) == 2
    assert v2["tiers"][0]["window"]["unit"]
    # before obligations, the resolution alone met a deadline
    assert v2["actions"] == [] and v2["deadlines"][0]["met_by"] == ["resolution"]
    reg_e = compliance.get("/v1/ladders/reg_e_error_resolution/versions/3").json()
    by_name = {d["name"]: d for d in reg_e["deadlines"]}
    assert by_name["investigation"]["requires"] == {
        "action": "provisional_credit", "within": "determine_or_provisionally_credit"}
    assert by_name["provisional_credit_notice"]["started_by"] == ["provisional_credit"]
    assert {"id": "provisional_credit", "name": "Provisional credit", "money": True,
            "citation": "12 CFR 1005.11(c)(2)(i)", "full_amount": True} in reg_e["actions"]
    assert compliance.get("/v1/ladders/cfpb_complaint_response/versions/9").status_code == 404


def test_sla_report_json(compliance, service, app):
    from escalation.adapters.sla_rollup import PostgresSlaRollup
    from escalation.service_layer import sla_rollup

    # the report answers from the rollup, once `report sla-refresh` has backfilled it
    sla_rollup.refresh(sla_rollup.RefreshRollup(), sla_rollup.RollupPorts(
        PostgresSlaRollup(app.engine), app.calendars, app.ladders.get))
    r = compliance.get("/v1/reports/sla", params={"from": "2000-01-01T00:00:00Z",
                                                  "to": "2100-01-01T00:00:00Z"})
    assert r.status_code == 200, r.text
    rows = r.json()["ladders"]["dispute_review"]
    standard = next(row for row in rows if row["tier"] == "standard")
    assert standard["entered"] >= 1
    for row in rows:  # JSON numbers of seconds, null for a tier where no stay ended
        for key in ("median_time_in_tier_s", "p95_time_in_tier_s"):
            assert row[key] is None or isinstance(row[key], int | float), (key, row)
    assert any(row["median_time_in_tier_s"] is None for row in rows) or all(
        isinstance(row["p95_time_in_tier_s"], float) for row in rows), rows
    bad = compliance.get("/v1/reports/sla", params={"from": "2026-01-01T00:00:00"})
    assert bad.status_code == 422
    assert service.get("/v1/reports/sla", params={"from": "2000-01-01T00:00:00Z",
                                                  "to": "2100-01-01T00:00:00Z"}).status_code == 403


def test_query_times_refuse_a_date_alone_as_such(compliance):
    for path, params in (("/v1/audit", {"from": "2026-11-30"}),
                         ("/v1/reports/sla", {"from": "2026-11-01T00:00:00Z",
                                              "to": "2026-11-30"})):
        r = compliance.get(path, params=params)
        assert r.status_code == 422, r.text
        [err] = r.json()["errors"]
        assert err["field"] == ("from" if path == "/v1/audit" else "to")
        assert "a date alone ('2026-11-30') is not accepted" in err["message"], err


def test_search_finds_ladder_events_by_decision(compliance):
    """The first-use baseline is a ledger event on the version's own chain (ADR 0012);
    ``decision=LADDER_RELEASED`` was a 422 before ladder events were ledger rows."""
    from escalation.domain.ladder_ledger import ladder_chain_id

    r = compliance.get("/v1/audit", params={"decision": "LADDER_BASELINE",
                                            "ladder": "dispute_review", "ladder_version": 1})
    assert r.status_code == 200, r.text
    [row] = r.json()["rows"]
    assert row["dispute_id"] == str(ladder_chain_id("dispute_review", 1)) and row["seq"] == 1
    assert (row["event"], row["match_decision"], row["actor"]) == (
        "LADDER_BASELINE", "LADDER_BASELINE", "baseline")
    assert row["details"]["checksum"] == row["source_hash"] and row["details"]["reason"]
    for decision in ("LADDER_RELEASED", "LADDER_APPLIED", "LADDER_APPLY_FAILED"):
        assert compliance.get("/v1/audit", params={"decision": decision}).status_code == 200
