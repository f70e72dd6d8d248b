"""Source attributes over the HTTP API (a real server on loopback, real Redis and
PostgreSQL): a create carries ``source_attributes``, every answer about the dispute returns
them (create, replay, get by id and by external id, cancel), its ENQUEUED ledger row
records them; a body past a bound is a 422 naming the field, with nothing written; the
OpenAPI schema states the bounds."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

from escalation.domain.source_attributes import (
    MAX_NAME_CHARS,
    MAX_SOURCE_ATTRIBUTES,
    MAX_VALUE_CHARS,
)
from tests.api.conftest import body

ATTRS = {"product": "Checking or savings account", "company": "<b>Example</b> Bank",
         "state": "FL", "amount": "125.50"}


def test_a_create_records_and_returns_its_source_attributes(
        service: httpx.Client, compliance: httpx.Client) -> None:
    ext = f"SA-{uuid.uuid4().hex[:8]}"
    req = body(dispute_id=None, source="cfpb", external_id=ext, source_attributes=ATTRS)
    made = service.post("/v1/escalations", json=req)
    assert made.status_code == 201, made.text
    assert made.json()["source_attributes"] == ATTRS
    did = made.json()["dispute_id"]
    again = service.post("/v1/escalations", json=req)  # a replay reads what is recorded
    assert again.status_code == 200 and again.json()["source_attributes"] == ATTRS
    for path in (f"/v1/escalations/{did}", f"/v1/sources/cfpb/escalations/{ext}"):
        got = service.get(path)
        assert got.status_code == 200, got.text
        assert got.json()["source_attributes"] == ATTRS
    audit = compliance.get(f"/v1/escalations/{did}/audit")
    assert audit.status_code == 200, audit.text
    first = audit.json()[0]
    details = first["details"]
    details = json.loads(details) if isinstance(details, str) else details
    assert first["event"] == "ENQUEUED" and details["source_attributes"] == ATTRS
    cancelled = service.post(f"/v1/escalations/{did}/cancel", json={"reason": "test"})
    assert cancelled.status_code == 200 and cancelled.json()["source_attributes"] == ATTRS


def test_a_dispute_without_source_attributes_says_null(service: httpx.Client) -> None:
    made = service.post("/v1/escalations", json=body())
    assert made.status_code == 201 and made.json()["source_attributes"] is None
    got = service.get(f"/v1/escalations/{made.json()['dispute_id']}")
    assert got.status_code == 200 and got.json()["source_attributes"] is None


@pytest.mark.parametrize(("attrs", "field"), [
    ({f"k{i}": "v" for i in range(MAX_SOURCE_ATTRIBUTES + 1)}, "source_attributes"),
    ({"k" * (MAX_NAME_CHARS + 1): "v"}, "source_attributes"),
    ({"product": "v" * (MAX_VALUE_CHARS + 1)}, "source_attributes.product"),
    ({"product": "a\nb"}, "source_attributes.product"),
])
def test_a_body_past_a_bound_is_a_422_naming_the_field_and_writes_nothing(
        service: httpx.Client, attrs: dict[str, Any], field: str) -> None:
    req = body(source_attributes=attrs)
    refused = service.post("/v1/escalations", json=req)
    assert refused.status_code == 422, refused.text
    assert [e["field"] for e in refused.json()["errors"]] == [field], refused.text
    assert service.get(f"/v1/escalations/{req['dispute_id']}").status_code == 404
    batch = service.post("/v1/escalations/batch", json={"items": [body(), req]})
    assert batch.status_code == 422, batch.text
    assert [e["field"] for e in batch.json()["errors"]] == [f"items[1].{field}"]


def test_a_value_that_is_not_text_is_a_422(service: httpx.Client) -> None:
    refused = service.post("/v1/escalations", json=body(source_attributes={"amount": 125}))
    assert refused.status_code == 422, refused.text
    assert "source_attributes" in refused.text


def test_the_schema_states_the_bounds() -> None:
    """The committed contract (docs/openapi.json, rendered from the app) declares them."""
    from escalation.entrypoints.api.openapi import render_openapi

    schema = json.loads(render_openapi())["components"]["schemas"]
    declared = schema["EscalationIn"]["properties"]["source_attributes"]
    shape = next(s for s in declared.get("anyOf", [declared]) if s.get("type") == "object")
    assert shape["maxProperties"] == MAX_SOURCE_ATTRIBUTES
    assert shape["propertyNames"]["maxLength"] == MAX_NAME_CHARS
    assert shape["additionalProperties"] == {"type": "string", "maxLength": MAX_VALUE_CHARS}
    assert "source_attributes" in schema["EscalationOut"]["properties"]
