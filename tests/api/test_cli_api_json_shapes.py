"""The CLI's ``--json`` and the API's answer for the same data have the same shape: the
``deadlines`` of ``enqueue --json`` are the API's list, ``report sla --json`` names its rows
``ladders`` as ``GET /v1/reports/sla`` does, and every instant is RFC 3339 with its ``T``
(real server, real Redis and PostgreSQL, the CLI as a subprocess)."""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime, timedelta
from typing import Any

from tests.helpers import run_cli

INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def _instants(doc: Any) -> list[str]:
    """Every string of ``doc`` that looks like a date and a time (with or without ``T``)."""
    if isinstance(doc, dict):
        return [s for v in doc.values() for s in _instants(v)]
    if isinstance(doc, list):
        return [s for v in doc for s in _instants(v)]
    if isinstance(doc, str) and re.match(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:", doc):
        return [doc]
    return []


def _same_instants(doc: Any) -> Any:
    """``doc`` with its instants parsed (``Z`` and ``+00:00`` are the same instant)."""
    if isinstance(doc, dict):
        return {k: _same_instants(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_same_instants(v) for v in doc]
    if isinstance(doc, str) and INSTANT.match(doc):
        return datetime.fromisoformat(doc.replace("Z", "+00:00"))
    return doc


def test_enqueue_json_deadlines_are_the_apis_list(service, cli_env: dict[str, str]) -> None:
    did = str(uuid.uuid4())
    res = run_cli(cli_env, "enqueue", "--dispute-id", did, "--source-hash", "ab" * 32,
                  "--ladder", "reg_e_error_resolution", "--opened-at",
                  (datetime.now().astimezone() - timedelta(hours=1)).isoformat(),
                  "--attribute", "new_account=false", "--attribute", "point_of_sale=false",
                  "--attribute", "foreign_initiated=false", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    cli = json.loads(res.stdout)
    api = service.get(f"/v1/escalations/{did}")
    assert api.status_code == 200, api.text
    assert isinstance(cli["deadlines"], list) and cli["deadlines"], cli
    assert _same_instants(cli["deadlines"]) == _same_instants(api.json()["deadlines"])
    assert all(INSTANT.match(s) for s in _instants(cli)), _instants(cli)


def test_audit_show_json_instants_are_rfc_3339(cli_env: dict[str, str]) -> None:
    did = str(uuid.uuid4())
    assert run_cli(cli_env, "enqueue", "--dispute-id", did, "--source-hash", "ab" * 32,
                   "--due-in", "2h").returncode == 0
    res = run_cli(cli_env, "audit", "show", did, "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    found = [s for r in rows for s in _instants(r)]
    assert found and all(INSTANT.match(s) for s in found), found
