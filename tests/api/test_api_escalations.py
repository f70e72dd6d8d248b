"""The HTTP API's escalation routes against a real uvicorn server: every role, bad and expired
tokens, problem+json errors, idempotent replays, bad input writes nothing, the token name is
the actor of every ledger row a request causes."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from escalation.adapters.audit_store import PostgresAuditStore
from escalation.service_layer.disputes import resolve_dispute
from tests.api.conftest import body

PROBLEM = "application/problem+json"


def _store(engine):
    return PostgresAuditStore(engine)


def test_the_probes_are_the_only_anonymous_routes(api_server):
    with api_server.client(None) as anon:
        assert anon.get("/healthz").json() == {"status": "ok"}
        assert anon.get("/livez").json() == {"status": "ok"}
        assert anon.get("/readyz").json() == {"status": "ready"}  # no details
        did = uuid.uuid4()
        for method, path in [("GET", "/metrics"), ("POST", "/v1/escalations"),
                             ("POST", "/v1/escalations/batch"),
                             ("GET", f"/v1/escalations/{did}"),
                             ("POST", f"/v1/escalations/{did}/cancel"),
                             ("POST", f"/v1/escalations/{did}/pause"),
                             ("POST", f"/v1/escalations/{did}/resume"),
                             ("GET", "/v1/sources/cfpb/escalations/X1")]:
            r = anon.request(method, path, json=body())
            assert r.status_code == 401, (method, path, r.text)
            assert r.headers["content-type"] == PROBLEM
            assert r.headers["www-authenticate"].startswith("Bearer")
            assert r.json()["status"] == 401


@pytest.mark.parametrize("which", ["expired", "revoked", "garbage"])
def test_bad_expired_and_revoked_tokens_get_401_and_write_nothing(api_server, engine, which):
    secret = "esc_not-a-token" if which == "garbage" else api_server.tokens[which]
    b = body()
    import httpx

    r = httpx.post(api_server.url + "/v1/escalations", json=b,
                   headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code == 401
    assert r.json()["type"] == "/problems/unauthorized"
    assert _store(engine).get(uuid.UUID(b["dispute_id"])) is None


def test_create_is_idempotent_and_records_the_token_name_as_actor(api_server, service, engine):
    b = body()
    first = service.post("/v1/escalations", json=b)
    assert first.status_code == 201, first.text
    assert first.json()["created"] is True
    assert first.json()["status"] == "pending"
    assert first.json()["tier"] == "standard"
    assert first.json()["materiality"] == "125.50"
    again = service.post("/v1/escalations", json=b)
    assert again.status_code == 200
    assert again.json()["created"] is False
    assert again.json()["seq"] == first.json()["seq"] == 1
    assert first.json()["source_hash_differs"] is again.json()["source_hash_differs"] is False
    trail = _store(engine).trail(uuid.UUID(b["dispute_id"]))
    assert [(r.event, r.actor) for r in trail] == [("ENQUEUED", api_server.names["service"])]


def test_a_replay_with_another_source_hash_says_it_changed_nothing(service, engine):
    ext = f"H-{uuid.uuid4().hex[:8]}"
    b = body(dispute_id=None, source="cfpb", external_id=ext, source_hash="aa" * 8)
    assert service.post("/v1/escalations", json=b).status_code == 201
    for other in (body(dispute_id=None, source="cfpb", external_id=ext, source_hash="bb" * 8),
                  body(dispute_id=str(resolve_dispute(source="cfpb", external_id=ext)[0]),
                       source_hash="BB" * 8, materiality="1.00")):
        r = service.post("/v1/escalations", json=other)
        assert r.status_code == 200, r.text
        assert (r.json()["created"], r.json()["source_hash_differs"]) == (False, True)
        assert r.json()["materiality"] == "125.50"  # the recorded escalation, unchanged
    # the hash is compared as recorded (lower-case hex): the same digest in capitals is no
    # difference
    same = service.post("/v1/escalations", json={**b, "source_hash": "AA" * 8})
    assert (same.status_code, same.json()["source_hash_differs"]) == (200, False)
    did = resolve_dispute(source="cfpb", external_id=ext)[0]
    [row] = _store(engine).trail(did)
    assert row.source_hash == "aa" * 8


def test_get_by_uuid_and_by_source_external_id(api_server, service, admin, engine):
    ext = f"CFPB-{uuid.uuid4().hex[:8]}"
    created = service.post("/v1/escalations",
                           json=body(dispute_id=None, source="cfpb", external_id=ext))
    assert created.status_code == 201, created.text
    did = created.json()["dispute_id"]
    assert did == str(resolve_dispute(source="cfpb", external_id=ext)[0])
    assert created.json()["external_id"] == ext
    # the source's name is kept: on the projection and the ENQUEUED row (the webhook event's
    # `source`, docs/reliability.md "Webhook event")
    [enqueued] = _store(engine).trail(uuid.UUID(did))
    assert enqueued.details["source"] == "cfpb"
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT source FROM escalation_state WHERE dispute_id = :d"),
                            {"d": did}).scalar_one() == "cfpb"
    by_id = service.get(f"/v1/escalations/{did}")
    by_ext = admin.get(f"/v1/sources/cfpb/escalations/{ext}")
    assert by_id.status_code == by_ext.status_code == 200
    assert by_id.json() == by_ext.json()
    other_source = service.get(f"/v1/sources/visa/escalations/{ext}")
    assert other_source.status_code == 404
    assert other_source.headers["content-type"] == PROBLEM


def test_get_shows_every_deadline_with_its_state(service):
    b = body(ladder="reg_e_error_resolution", due_at=None,
             opened_at="2026-01-05T15:00:00+00:00", tier=None,
             attributes={"new_account": False, "point_of_sale": False,
                         "foreign_initiated": False})
    r = service.post("/v1/escalations", json=b)
    assert r.status_code == 201, r.text
    got = service.get(f"/v1/escalations/{b['dispute_id']}").json()
    assert got["deadlines"], got
    # opened in January 2026 with day-scale regulatory windows: every deadline has passed
    assert {d["state"] for d in got["deadlines"]} == {"missed"}


@pytest.mark.parametrize(("change", "field"), [
    ({"due_at": "2030-01-01T00:00:00"}, "due_at"),  # naive
    ({"materiality": 12.5}, "materiality"),  # a float where money is due
    ({"materiality": "-1.00"}, "materiality"),
    ({"materiality": "NaN"}, "materiality"),
    ({"tier": "no_such_tier"}, "tier"),
    ({"opened_at": "2026-01-01T00:00:00+00:00"}, None),  # both due_at and opened_at
    ({"dispute_id": "not-a-uuid"}, "dispute_id"),
    ({"source_hash": "xyz"}, "source_hash"),
    ({"ladder": "no_such_ladder"}, "ladder"),
    ({"colour": "red"}, "colour"),  # unknown field
    ({"due_at": "tomorrow"}, "due_at"),
    ({"timezone": "Mars/Olympus"}, "timezone"),
    ({"calendar": "nope"}, "calendar"),
    ({"ladder": "reg_e_error_resolution"}, "attributes"),  # its deadlines need three
    ({"ladder": "reg_e_error_resolution",  # one the ladder's deadlines do not use
      "attributes": {"new_account": True, "point_of_sale": False, "foreign_initiated": False,
                     "bogus": True}}, "attributes"),
])
def test_bad_input_is_422_naming_the_field_and_writes_nothing(service, engine, change, field):
    b = body()
    b.update(change)
    r = service.post("/v1/escalations", json=b)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == PROBLEM
    doc = r.json()
    assert doc["type"] == "/problems/invalid-input"
    if field is not None:
        assert [e["field"] for e in doc["errors"]] == [field], doc
    if b.get("dispute_id") != "not-a-uuid":
        assert _store(engine).get(uuid.UUID(b["dispute_id"])) is None


@pytest.mark.parametrize("field", ["due_at", "opened_at", "notice_at"])
def test_a_date_without_time_is_refused_as_such(service, engine, field):
    b = body()
    if field == "opened_at":
        del b["due_at"]  # exactly one of due_at and opened_at
    b[field] = "2026-11-30"
    for path, doc_field, sent in (("/v1/escalations", field, b),
                                  ("/v1/escalations/batch", f"items[1].{field}",
                                   {"items": [body(), b]})):
        r = service.post(path, json=sent)
        assert r.status_code == 422, r.text
        [err] = r.json()["errors"]
        assert err["field"] == doc_field
        # the request's own words, not a naive midnight it never wrote
        assert "a date alone ('2026-11-30') is not accepted" in err["message"]
        assert "ISO-8601 time with offset, e.g. 2026-11-30T09:00:00-05:00" in err["message"]
        assert "naive" not in err["message"]
    assert _store(engine).get(uuid.UUID(b["dispute_id"])) is None


def test_cancel_pause_resume_by_both_addresses(api_server, service, engine):
    ext = f"X-{uuid.uuid4().hex[:6]}"
    did = service.post("/v1/escalations", json=body(dispute_id=None, source="acme",
                                                     external_id=ext)).json()["dispute_id"]
    paused = service.post(f"/v1/sources/acme/escalations/{ext}/pause", json={"reason": "docs"})
    assert paused.status_code == 200, paused.text
    assert paused.json()["status"] == "paused"
    assert paused.json()["remaining_ms"] > 0
    assert paused.json()["due_at"] is None  # the clock is stopped: no breach time
    seen = service.get(f"/v1/escalations/{did}").json()  # a later read says the same
    assert (seen["status"], seen["due_at"]) == ("paused", None)
    assert seen["remaining_ms"] == paused.json()["remaining_ms"]
    assert seen["basis"] == paused.json()["basis"]
    again = service.post(f"/v1/escalations/{did}/pause")
    assert again.status_code == 409
    assert again.json()["type"] == "/problems/conflict"
    resumed = service.post(f"/v1/escalations/{did}/resume")
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["status"] == "pending"
    assert resumed.json()["due_at"] is not None
    assert service.post(f"/v1/escalations/{did}/resume").status_code == 409
    cancelled = service.post(f"/v1/sources/acme/escalations/{ext}/cancel",
                             json={"reason": "resolved in favour"})
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["due_at"] is None
    replay = service.post(f"/v1/escalations/{did}/cancel")
    assert replay.status_code == 200
    assert replay.json()["seq"] == cancelled.json()["seq"]
    recreate = service.post("/v1/escalations", json=body(dispute_id=did))
    assert recreate.status_code == 409
    trail = _store(engine).trail(uuid.UUID(did))
    assert [r.event for r in trail] == ["ENQUEUED", "PAUSED", "RESUMED", "CANCELLED"]
    assert {r.actor for r in trail} == {api_server.names["service"]}


def test_unknown_dispute_is_404_for_every_route(service):
    did = uuid.uuid4()
    assert service.get(f"/v1/escalations/{did}").status_code == 404
    for action in ("cancel", "pause", "resume"):
        r = service.post(f"/v1/escalations/{did}/{action}")
        assert r.status_code == 404, (action, r.text)
        assert r.json()["type"] == "/problems/not-found"
    assert service.get("/v1/escalations/not-a-uuid").status_code == 422


def test_roles(api_server, compliance, admin, service, engine):
    b = body()
    forbidden = compliance.post("/v1/escalations", json=b)
    assert forbidden.status_code == 403
    assert forbidden.json()["type"] == "/problems/forbidden"
    assert _store(engine).get(uuid.UUID(b["dispute_id"])) is None
    assert compliance.get(f"/v1/escalations/{b['dispute_id']}").status_code == 403
    created = admin.post("/v1/escalations", json=b)
    assert created.status_code == 201
    assert _store(engine).trail(uuid.UUID(b["dispute_id"]))[0].actor == api_server.names["admin"]
    assert service.get("/readyz").status_code == 200
    assert admin.get("/readyz").json()["checks"] == {"redis": "ok", "postgres": "ok",
                                                     "ladders": "ok"}


def test_batch_is_all_or_nothing(service, engine):
    good = [body() for _ in range(5)]
    bad = [*good[:2], body(due_at="2030-01-01T00:00:00"), *good[2:]]
    r = service.post("/v1/escalations/batch", json={"items": bad})
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "items[2].due_at"
    # the detail counts as the field does (it said "request 3:" beside items[2])
    assert r.json()["detail"].startswith("items[2]: "), r.json()
    assert r.json()["errors"][0]["message"] == r.json()["detail"]
    assert all(_store(engine).get(uuid.UUID(b["dispute_id"])) is None for b in good)
    ok = service.post("/v1/escalations/batch", json={"items": good})
    assert ok.status_code == 200, ok.text
    assert ok.json()["created"] == 5
    replay = service.post("/v1/escalations/batch", json={"items": good})
    assert (replay.json()["created"], replay.json()["existing"]) == (0, 5)
    too_many = service.post("/v1/escalations/batch", json={"items": [body()] * 1001})
    assert too_many.status_code == 422


def test_the_readme_curl_example_works(service):
    import json
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    data = json.loads(re.search(r"-d '(\{.*?\})'", readme, re.S).group(1))
    r = service.post("/v1/escalations", json=data)
    assert r.status_code in (200, 201), r.text
    path = re.search(r"http://127\.0\.0\.1:8080(/v1/sources/\S+)", readme).group(1)
    assert service.get(path).json()["dispute_id"] == r.json()["dispute_id"]
