"""A money action's currency must be an active ISO 4217 code: an unknown one is a 422 naming
``currency`` and nothing is written (HTTP against a real server, real Redis and
PostgreSQL)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.api.test_api_obligations import _credit, _reg_e, _rows


def test_an_unknown_currency_is_refused_naming_the_field_and_nothing_is_written(
        service: httpx.Client, engine: Any) -> None:
    notice = datetime.now(UTC).replace(microsecond=0) - timedelta(days=2)
    did = _reg_e(service, notice)
    n = len(_rows(engine, did))
    for code in ("XXQ", "HRK", "XXX", "usd"):
        r = service.post(f"/v1/escalations/{did}/actions",
                         json=_credit(notice, f"c-{uuid.uuid4().hex}", currency=code))
        assert r.status_code == 422, (code, r.text)
        assert r.json()["errors"][0]["field"] == "currency", (code, r.json())
        assert "ISO 4217" in r.json()["errors"][0]["message"] and repr(code) in r.text
    assert len(_rows(engine, did)) == n
    ok = service.post(f"/v1/escalations/{did}/actions",
                      json=_credit(notice, f"c-{uuid.uuid4().hex}", currency="EUR"))
    assert ok.status_code == 201, ok.text
    assert len(_rows(engine, did)) == n + 1
