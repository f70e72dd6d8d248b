"""The OpenAPI contract checked against a real server: schemathesis (every check it has,
positive and negative data, all its phases) with an admin token reports zero failures; and
the statuses the contract declares for what HTTP says (405, 415, 400) are what the server
sends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.conftest import Server, make_tokens, start_server, stop_server
from tests.conftest import scratch_database, signing_key_pem

MAX_EXAMPLES = 12
"""Per operation and phase: the whole run takes about a minute on a loaded machine."""

# Expected statuses of data that satisfies the schema. The values a ladder, a calendar or a
# dispute's recorded state accept (a tier or action id the ladder declares, an instant not
# before the dispute's anchor, a known time zone) are server data that no static JSON Schema
# can state, so a schema-valid request may still be a 422 naming the field.
CONFIG = """\
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "401", "403", "404", "409", "422"]
"""


@pytest.fixture(scope="module")
def contract_server(redis_url: str, server_urls: tuple[str, str]) -> Iterator[Server]:
    """A server on a database of its own (schemathesis creates, pauses and resolves many
    disputes: they must not reach other tests' ledger reads), with the checkpoint signing
    key (so a case file is a 404 or 409, never the 503 of a server that cannot sign), no
    failed-auth throttle and no load shedding. The SLA rollup is backfilled first, as an
    operator does once per database (``report sla-refresh``): until then GET
    /v1/reports/sla is a declared 503, which schemathesis counts as a server error."""
    import redis

    from escalation.adapters.db import make_engine

    namespace = f"t{uuid.uuid4().hex[:12]}"
    with scratch_database(server_urls[1], "escalation_contract") as database_url:
        engine = make_engine(database_url, pool_size=1)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
        env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=database_url,
                   ESCALATION_NAMESPACE=namespace, ESCALATION_LOG_FORMAT="json",
                   ESCALATION_LOG_LEVEL="ERROR", ESCALATION_API_TOKEN_CACHE_S="0",
                   ESCALATION_API_AUTH_FAIL_LIMIT="1000000",
                   ESCALATION_API_MAX_IN_FLIGHT="1000",
                   ESCALATION_CHECKPOINT_KEY=signing_key_pem())
        tokens, names = make_tokens(engine, f"st{uuid.uuid4().hex[:8]}")
        subprocess.run([sys.executable, "-m", "escalation", "report", "sla-refresh"],
                       env=env, check=True, capture_output=True, timeout=300)
        url, proc = start_server(env)
        try:
            yield Server(url, namespace, env, tokens, names, proc)
        finally:
            stop_server(proc)
            engine.dispose()
            client = redis.Redis.from_url(redis_url, decode_responses=True)
            for key in client.scan_iter(match=f"*{{{namespace}:*", count=1000):
                client.delete(key)
            client.close()


@pytest.mark.timeout(600)
def test_schemathesis_finds_no_contract_failure(contract_server: Server,
                                                tmp_path: Path) -> None:
    from escalation.entrypoints.api.openapi import render_openapi

    schema = tmp_path / "openapi.json"
    schema.write_text(render_openapi())
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    run = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run",
         str(schema), "--url", contract_server.url, "--checks", "all",
         "--header", f"Authorization: Bearer {contract_server.tokens['admin']}",
         "--max-examples", str(MAX_EXAMPLES), "--workers", "1", "--seed", "20261206",
         "--request-timeout", "30"],
        capture_output=True, text=True, timeout=540, check=False, cwd=tmp_path,
        env={**os.environ, "NO_COLOR": "1"})
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-12000:]
    assert "GET /v1/escalations/{dispute_id}" in report or "Tested" in report, report[-4000:]


def test_get_on_the_batch_path_is_405_with_allow(contract_server: Server) -> None:
    with contract_server.client("admin") as c:
        r = c.get("/v1/escalations/batch")
    assert r.status_code == 405, r.text
    assert r.headers["allow"] == "POST"
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"] == "/problems/method-not-allowed"


def test_a_text_plain_body_is_415_and_nothing_is_written(contract_server: Server) -> None:
    did = str(uuid.uuid4())
    body = json.dumps({"dispute_id": did, "source_hash": "ab12", "materiality": "1.00",
                       "due_at": "2030-01-01T00:00:00+00:00"})
    with contract_server.client("admin") as c:
        r = c.post("/v1/escalations", content=body, headers={"Content-Type": "text/plain"})
        assert r.status_code == 415, r.text
        assert r.headers["content-type"] == "application/problem+json"
        doc = r.json()
        assert doc["type"] == "/problems/unsupported-media-type"
        assert doc["errors"][0]["field"] == "Content-Type"
        assert c.get(f"/v1/escalations/{did}").status_code == 404
        # the same bytes as JSON are accepted: the media type alone made the 415
        ok = c.post("/v1/escalations", content=body,
                    headers={"Content-Type": "application/json; charset=utf-8"})
        assert ok.status_code == 201, ok.text


def test_a_body_that_is_not_utf8_is_400_problem(contract_server: Server) -> None:
    with contract_server.client("admin") as c:
        r = c.post("/v1/escalations", content=b'{"source_hash": "\xff\xfe"}',
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"] == "/problems/bad-request"
    assert r.json()["errors"] == [{"field": "body", "message": r.json()["detail"]}]
    assert "not UTF-8" in r.json()["detail"] and "0xff at offset 17" in r.json()["detail"]
    with contract_server.client("admin") as c:
        batch = c.post("/v1/escalations/batch", content=b'{"items": ["\xc3"]}',
                       headers={"Content-Type": "application/json"})
    assert batch.status_code == 400, batch.text
    assert batch.json()["errors"][0]["field"] == "body", batch.text


def _doc() -> dict[str, object]:
    from escalation.entrypoints.api.app import create_app

    return create_app().openapi()


def test_operation_ids_are_named_and_errors_are_problem_json_only() -> None:
    from escalation.entrypoints.api.contract import OPERATION_IDS

    doc = _doc()
    ids = []
    for path, ops in doc["paths"].items():  # type: ignore[attr-defined]
        for method, op in ops.items():
            ids.append(op["operationId"])
            assert op["operationId"] in OPERATION_IDS.values(), (method, path)
            for code, response in op["responses"].items():
                if int(code) < 400 or (path, code) == ("/readyz", "503"):
                    continue
                assert list(response["content"]) == ["application/problem+json"], \
                    (method, path, code)
            if path.startswith("/v1/"):
                assert {"401", "403", "405", "422", "429", "503"} <= set(op["responses"])
            if method == "post":
                assert {"400", "413", "415"} <= set(op["responses"])
    assert len(ids) == len(set(ids))
    assert "getEscalationByExternalId" in ids and "createEscalation" in ids
    metrics = doc["paths"]["/metrics"]["get"]["responses"]  # type: ignore[index]
    assert {"401", "403"} <= set(metrics)
    ready = doc["paths"]["/readyz"]["get"]["responses"]  # type: ignore[index]
    assert ready["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Readiness"}


def test_formats_and_the_dispute_naming_rule_are_in_the_schema() -> None:
    schemas = _doc()["components"]["schemas"]  # type: ignore[index]
    create = schemas["EscalationIn"]
    assert create["properties"]["dispute_id"]["anyOf"][0]["format"] == "uuid"
    assert create["properties"]["due_at"]["anyOf"][0]["format"] == "date-time"
    assert [b["required"] for b in create["oneOf"]] == [["dispute_id"],
                                                       ["source", "external_id"]]
    assert schemas["EscalationOut"]["properties"]["dispute_id"]["format"] == "uuid"
    assert schemas["EscalationOut"]["properties"]["due_at"]["anyOf"][0]["format"] == \
        "date-time"
