"""Text and numbers PostgreSQL cannot store are a 422 problem, never a 500, and write nothing:
a NUL in a cancel or pause reason, a ladder version beyond a PostgreSQL integer."""

from __future__ import annotations

from typing import Any

import httpx

from tests.api.conftest import body


def test_a_control_character_in_a_reason_is_422_and_writes_nothing(
    service: httpx.Client, compliance: httpx.Client
) -> None:
    b = body()
    assert service.post("/v1/escalations", json=b).status_code == 201
    for action in ("cancel", "pause"):
        r = service.post(f"/v1/escalations/{b['dispute_id']}/{action}",
                         json={"reason": "done\u0000"})
        assert r.status_code == 422, (action, r.status_code, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert "reason" in r.text
    trail: Any = compliance.get(f"/v1/escalations/{b['dispute_id']}/audit").json()
    rows = trail["rows"] if isinstance(trail, dict) else trail
    assert [row["event"] for row in rows] == ["ENQUEUED"]


def test_a_ladder_version_beyond_an_integer_is_422(compliance: httpx.Client) -> None:
    r = compliance.get("/v1/audit", params={"ladder_version": "99999999999999999999"})
    assert r.status_code == 422, (r.status_code, r.text)
    assert r.headers["content-type"] == "application/problem+json"


def test_an_empty_external_id_is_named(service: httpx.Client) -> None:
    for ext in ("", "   "):
        r = service.post("/v1/escalations",
                         json=body(dispute_id=None, source="cfpb", external_id=ext))
        assert r.status_code == 422, (ext, r.status_code, r.text)
        problem = r.json()
        assert [e["field"] for e in problem["errors"]] == ["external_id"], problem
        assert "external id must not be empty" in problem["detail"]


def test_a_body_that_is_not_json_names_the_body_and_where_it_broke(
    service: httpx.Client,
) -> None:
    for raw in (b'{"dispute_id": ', b"not json", b'{"a": 1,}'):
        r = service.post("/v1/escalations", content=raw,
                         headers={"content-type": "application/json"})
        assert r.status_code == 422, (raw, r.status_code, r.text)
        problem = r.json()
        assert [e["field"] for e in problem["errors"]] == ["body"], problem
        assert problem["detail"].startswith("body: the body is not valid JSON at character ")
