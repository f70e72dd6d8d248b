"""docs/openapi.json is generated from the app and must stay in sync with it."""

from __future__ import annotations

import json
from pathlib import Path

from escalation.entrypoints.api.openapi import render_openapi

DOC = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_openapi_document_is_up_to_date() -> None:
    assert DOC.read_text() == render_openapi(), (
        "docs/openapi.json is stale: run "
        "`python -m escalation.entrypoints.api.openapi > docs/openapi.json`"
    )


def test_every_route_is_documented_with_auth_errors_and_examples() -> None:
    doc = json.loads(DOC.read_text())
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if path in ("/healthz", "/livez", "/readyz"):  # probes: no token needed
                assert "security" not in op
                continue
            assert op.get("security") == [{"HTTPBearer": []}], (method, path)
            for name in (p.strip("{}") for p in path.split("/") if p.startswith("{")):
                assert name in {p["name"] for p in op.get("parameters", [])}, (path, name)
    schemas = doc["components"]["schemas"]
    for model in ("EscalationIn", "BatchIn", "EscalationOut", "Problem"):
        assert schemas[model].get("examples"), model
