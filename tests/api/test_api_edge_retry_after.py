"""Every 503 the app sends carries ``Retry-After``, also one a route builds itself without it
(a console page's plain-text 503): the edge middleware adds it. The real app in process, on
the real Redis and PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from fastapi import Response
from starlette.testclient import TestClient

from escalation.domain.access import Role


def test_a_503_without_retry_after_gets_one_and_one_with_it_keeps_its_own(
        settings: Any, engine: sa.Engine, redis_client: Any) -> None:
    from escalation.adapters.token_store import PostgresTokenStore
    from escalation.entrypoints.api.app import create_app
    from escalation.entrypoints.api.problems import RETRY_AFTER_S
    from escalation.service_layer.tokens import CreateToken, create_token

    secret, _ = create_token(CreateToken(f"ra{uuid.uuid4().hex[:8]}", Role.ADMIN.value, 1),
                             PostgresTokenStore(engine))
    app = create_app(settings)
    app.add_api_route("/test-bare-503", lambda: Response("down\n", 503,
                                                         media_type="text/plain"))
    app.add_api_route("/test-own-503", lambda: Response("down\n", 503,
                                                        headers={"Retry-After": "42"}))
    with TestClient(app, headers={"Authorization": f"Bearer {secret}"}) as client:
        bare = client.get("/test-bare-503")
        own = client.get("/test-own-503")
        ok = client.get("/livez")
    assert bare.status_code == 503 and bare.headers["retry-after"] == str(RETRY_AFTER_S)
    assert own.status_code == 503 and own.headers.get_list("retry-after") == ["42"]
    assert "retry-after" not in ok.headers
    assert bare.headers["x-request-id"] and own.headers["x-request-id"]
