"""`escalation token create|list|revoke` and the (source, external id) address in the CLI
(cancel, pause, resume, audit search --dispute ... --source ...)."""

from __future__ import annotations

import json
import uuid

import httpx

from escalation.service_layer.disputes import resolve_dispute
from tests.api.conftest import body
from tests.helpers import run_cli


def test_token_lifecycle_against_a_running_server(api_server, cli_env):
    cli_env["ESCALATION_NAMESPACE"] = api_server.namespace
    name = f"svc-{uuid.uuid4().hex[:8]}"
    made = run_cli(cli_env, "token", "create", "--name", name, "--role", "service",
                   "--ttl-days", "2", "--json")
    assert made.returncode == 0, made.stderr
    secret = json.loads(made.stdout)["token"]
    headers = {"Authorization": f"Bearer {secret}"}
    assert httpx.post(api_server.url + "/v1/escalations", json=body(),
                      headers=headers).status_code == 201
    listed = json.loads(run_cli(cli_env, "token", "list", "--json").stdout)
    mine = [t for t in listed if t["name"] == name]
    assert mine and mine[0]["state"] == "active" and mine[0]["role"] == "service"
    assert secret not in json.dumps(listed)
    dup = run_cli(cli_env, "token", "create", "--name", name, "--role", "admin")
    assert dup.returncode == 2 and "already exists" in dup.stderr
    assert run_cli(cli_env, "token", "revoke", name).returncode == 0
    again = run_cli(cli_env, "token", "revoke", name)
    assert again.returncode == 0 and "already revoked" in again.stdout  # like cancel twice
    assert httpx.post(api_server.url + "/v1/escalations", json=body(),
                      headers=headers).status_code == 401
    bad = run_cli(cli_env, "token", "create", "--name", "x y", "--role", "root")
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")
    # the actors the product records itself cannot be token names: an API caller's ledger
    # rows must never read like an operator's (`cli`, `user@host`) or a worker's (`h:1:ab`)
    for taken, says in (("cli", "reserved"), ("CLI", "reserved"), ("baseline", "reserved"),
                        ("reconcile", "reserved"), ("root@vm", "letters, digits and _.-"),
                        ("host:12:ab12", "letters, digits and _.-")):
        res = run_cli(cli_env, "token", "create", "--name", taken, "--role", "service")
        assert res.returncode == 2 and says in res.stderr, (taken, res.stdout, res.stderr)
    listed = run_cli(cli_env, "token", "list", "--json")
    assert not any(t in listed.stdout for t in ('"cli"', '"root@vm"', '"host:12:ab12"'))


def test_cli_addresses_a_dispute_by_source_and_external_id(api_server, service, cli_env):
    cli_env["ESCALATION_NAMESPACE"] = api_server.namespace
    ext = f"C-{uuid.uuid4().hex[:6]}"
    assert service.post("/v1/escalations", json=body(dispute_id=None, source="cfpb",
                                                     external_id=ext)).status_code == 201
    did = str(resolve_dispute(source="cfpb", external_id=ext)[0])
    for cmd in (("pause", ext, "--source", "cfpb"), ("resume", ext, "--source", "cfpb"),
                ("cancel", ext, "--source", "cfpb")):
        r = run_cli(cli_env, *cmd)
        assert r.returncode == 0, (cmd, r.stderr)
        assert did in r.stdout
    found = run_cli(cli_env, "audit", "search", "--dispute", ext, "--source", "cfpb", "--json")
    events = [json.loads(line)["event"] for line in found.stdout.splitlines()]
    assert events == ["ENQUEUED", "PAUSED", "RESUMED", "CANCELLED"]
    unknown = run_cli(cli_env, "cancel", ext, "--source", "visa")
    assert unknown.returncode == 3 and "no escalation" in unknown.stderr  # not found
