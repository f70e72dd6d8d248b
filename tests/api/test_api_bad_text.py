"""Text and numbers PostgreSQL cannot store are a 422 problem, never a 500, and write nothing:
a NUL in a cancel or pause reason, a ladder version beyond a PostgreSQL integer."""

from __future__ import annotations

import json
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


def test_nan_and_a_number_too_long_to_read_are_named_as_the_body(
    service: httpx.Client,
) -> None:
    item = json.dumps(body())
    for raw, says in ((item.replace('"materiality": "', '"materiality": NaN, "x": "'),
                       "NaN is not a JSON number"),
                      (item[:-1] + ', "n": ' + "7" * 5000 + "}", "a number of 5000 digits")):
        r = service.post("/v1/escalations", content=raw.encode(),
                         headers={"content-type": "application/json"})
        assert r.status_code == 422, (r.status_code, r.text[:300])
        problem = r.json()
        assert [e["field"] for e in problem["errors"]] == ["body"], problem
        assert says in problem["detail"], problem["detail"]


def test_a_lone_surrogate_in_an_external_id_or_source_is_422_not_500(
    service: httpx.Client, compliance: httpx.Client
) -> None:
    # JSON may spell a lone surrogate ("\ud800"); it has no UTF-8 bytes, so it can be neither
    # hashed into the stable dispute id nor stored. It used to escape as a plain-text 500.
    before = compliance.get("/v1/audit", params={"limit": 1000}).json()
    for fields, says in (({"external_id": "ab\ud800"}, "not valid Unicode text"),
                         ({"external_id": "\udcff"}, "not valid Unicode text"),
                         ({"external_id": "ok-1", "source": "crm\ud800"}, "source must be")):
        item = body(dispute_id=None, **{"source": "crm", **fields})
        for path, payload in (("/v1/escalations", item),
                              ("/v1/escalations/batch", {"items": [item]})):
            r = service.post(path, content=json.dumps(payload),  # ASCII: "\ud800" escaped
                             headers={"content-type": "application/json"})
            assert r.status_code == 422, (path, fields, r.status_code, r.text)
            assert r.headers["content-type"] == "application/problem+json"
            problem = r.json()
            assert says in problem["detail"], r.text
            named = "source" if "source" in fields else "external_id"
            assert [e["field"] for e in problem["errors"]] in ([named], [f"items[0].{named}"])
    after = compliance.get("/v1/audit", params={"limit": 1000}).json()
    assert after == before  # nothing written


def test_a_key_given_twice_in_a_body_is_422_and_writes_nothing(
    service: httpx.Client, compliance: httpx.Client
) -> None:
    # {"external_id": "D1", "external_id": "D2"} created D2 (the parser keeps the last value)
    b = body(dispute_id=None, source="crm", external_id="D1")
    raw = json.dumps(b)[:-1] + ', "external_id": "D2"}'
    before = compliance.get("/v1/audit", params={"limit": 1000}).json()
    for path, content in (("/v1/escalations", raw),
                          ("/v1/escalations/batch", '{"items": [' + raw + "]}")):
        r = service.post(path, content=content, headers={"content-type": "application/json"})
        assert r.status_code == 422, (path, r.status_code, r.text)
        problem = r.json()
        assert [e["field"] for e in problem["errors"]] == ["external_id"], problem
        assert "given more than once" in problem["detail"]
    assert compliance.get("/v1/audit", params={"limit": 1000}).json() == before
    assert service.post("/v1/escalations", json=b).status_code == 201  # once is fine
