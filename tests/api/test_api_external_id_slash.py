"""A source system's external id containing ``/`` (``ACC/2026/17``), sent percent-encoded,
reaches its dispute on every by-external-id route (HTTP against a real server, real Redis
and PostgreSQL)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import httpx

from tests.api.conftest import body
from tests.api.test_api_obligations import REG_E, _credit


def _create(service: httpx.Client, ext: str, **over: object) -> str:
    made = service.post("/v1/escalations",
                        json=body(dispute_id=None, source="svc", external_id=ext, **over))
    assert made.status_code == 201, made.text
    assert made.json()["external_id"] == ext
    return str(made.json()["dispute_id"])


def test_an_external_id_with_slashes_is_reachable_on_every_route(
        service: httpx.Client, compliance: httpx.Client) -> None:
    ext = f"ACC/2026/{uuid.uuid4().hex[:8]}"
    did = _create(service, ext)
    path = f"/v1/sources/svc/escalations/{quote(ext, safe='')}"
    assert "%2F" in path

    got = service.get(path)
    assert got.status_code == 200, got.text
    assert got.json()["dispute_id"] == did and got.json()["external_id"] == ext
    assert compliance.get(path + "/audit").status_code == 200
    case = compliance.get(path + "/case-file")  # this server has no signing key: its 503
    assert case.status_code == 503 and "CHECKPOINT_KEY" in case.text, case.text
    assert service.post(path + "/pause", json={"reason": "slash"}).status_code == 200
    assert service.post(path + "/resume").status_code == 200
    cancelled = service.post(path + "/cancel", json={"reason": "slash"})
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["dispute_id"] == did and cancelled.json()["status"] == "cancelled"


def test_actions_and_resolve_by_an_external_id_with_slashes(service: httpx.Client) -> None:
    notice = datetime.now(UTC).replace(microsecond=0) - timedelta(days=2)
    ext = f"ACC/{uuid.uuid4().hex[:8]}/cancel"  # a last segment named like a sub-resource
    did = _create(service, ext, ladder="reg_e_error_resolution", due_at=None,
                  materiality="100.00", opened_at=notice.isoformat(),
                  notice_at=notice.isoformat(), attributes=REG_E)
    path = f"/v1/sources/svc/escalations/{quote(ext, safe='')}"
    credit = service.post(path + "/actions", json=_credit(notice, f"k-{uuid.uuid4().hex}"))
    assert credit.status_code == 201, credit.text
    assert credit.json()["dispute_id"] == did
    resolved = service.post(path + "/resolve", json={
        "outcome": "error_corrected", "idempotency_key": f"r-{uuid.uuid4().hex}"})
    assert resolved.status_code == 201, resolved.text
    assert resolved.json()["dispute_id"] == did


def test_the_route_template_names_the_parameter_without_its_converter(
        service: httpx.Client, admin: httpx.Client) -> None:
    ext = f"ACC/{uuid.uuid4().hex[:8]}"
    _create(service, ext)
    path = f"/v1/sources/svc/escalations/{quote(ext, safe='')}"
    assert service.get(path).status_code == 200
    template = "/v1/sources/{source}/escalations/{external_id}"
    odd = service.get(path, params={"verbose": "1"})  # an undeclared query parameter
    assert odd.status_code == 422 and f"GET {template} accepts" in odd.json()["detail"]
    metrics = admin.get("/metrics").text
    assert f'route="{template}"' in metrics
    assert "{external_id:" not in metrics and ext not in metrics
