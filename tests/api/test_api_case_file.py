"""The case file over HTTP: compliance and admin tokens download one dispute's signed case
file (by id or by external id) or the disputes of an audit search in one file, the offline
verifier accepts it under the server's key; a search without a filter, with an unknown
name or matching nothing is a 422 naming the field;
a service token is refused (403), an unknown dispute is 404, and before the first checkpoint
the export is refused with 409 (nothing to prove the chains against)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from escalation.domain.case_file import public_key_from_pem, verify_bundle
from tests.api.conftest import Server, body, make_tokens, start_server, stop_server
from tests.conftest import signing_key_pem
from tests.helpers import run_cli


@pytest.fixture()
def keyed_server(scratch: sa.Engine, redis_url: str) -> Iterator[Server]:
    """A server on a database of its own, with the checkpoint signing key configured."""
    namespace = f"t{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_NAMESPACE=namespace,
               ESCALATION_DATABASE_URL=scratch.url.render_as_string(hide_password=False),
               ESCALATION_LOG_FORMAT="json", ESCALATION_LOG_LEVEL="WARNING",
               ESCALATION_API_TOKEN_CACHE_S="0", ESCALATION_API_AUTH_FAIL_LIMIT="1000000",
               ESCALATION_CHECKPOINT_KEY=signing_key_pem())
    tokens, names = make_tokens(scratch, f"cf{uuid.uuid4().hex[:8]}")
    url, proc = start_server(env)
    try:
        yield Server(url, namespace, env, tokens, names, proc)
    finally:
        stop_server(proc)


def test_case_file_download_verifies_offline(keyed_server: Server, tmp_path: Path) -> None:
    ext = f"CF-{uuid.uuid4().hex[:6]}"
    with keyed_server.client("service") as service, \
            keyed_server.client("compliance") as compliance, \
            keyed_server.client("admin") as admin:
        made = service.post("/v1/escalations", json=body(dispute_id=None, source="acme",
                                                         external_id=ext))
        assert made.status_code in (200, 201), made.text
        did = made.json()["dispute_id"]
        early = compliance.get(f"/v1/escalations/{did}/case-file")
        assert early.status_code == 409 and "no checkpoint yet" in early.json()["detail"]
        assert run_cli(keyed_server.env, "audit", "checkpoint").returncode == 0
        got = compliance.get(f"/v1/escalations/{did}/case-file")
        assert got.status_code == 200, got.text
        assert got.headers["content-type"].startswith("application/json")
        assert f'filename="case-file-{did}.json"' in got.headers["content-disposition"]
        by_ext = admin.get(f"/v1/sources/acme/escalations/{ext}/case-file")
        assert by_ext.status_code == 200
        assert service.get(f"/v1/escalations/{did}/case-file").status_code == 403
        assert compliance.get(f"/v1/escalations/{uuid.uuid4()}/case-file").status_code == 404
        # a filtered set: the disputes the service token enqueued
        found = admin.get("/v1/case-file", params={
            "decision": "ENQUEUED", "actor": keyed_server.names["service"]})
        assert found.status_code == 200, found.text
        assert [d["dispute_id"] for d in found.json()["disputes"]] == [did]
        for params, field in (({}, "dispute_ids"), ({"decision": "NO_SUCH"}, "decision"),
                              ({"actor": "nobody-at-all"}, "dispute_ids")):
            bad = compliance.get("/v1/case-file", params=params)
            assert bad.status_code == 422 and field in bad.text, (params, bad.text)
    pem = run_cli(keyed_server.env, "audit", "public-key").stdout.encode()
    report = verify_bundle(got.content, public_key_from_pem(pem))
    assert report.ok, report.errors
    assert got.json()["created_by"] == keyed_server.names["compliance"]
    assert got.json()["disputes"][0]["sealed"]["seq"] == 1
    assert verify_bundle(by_ext.content, public_key_from_pem(pem)).ok
    assert verify_bundle(found.content, public_key_from_pem(pem)).ok
