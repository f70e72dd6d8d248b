"""Fixtures shared by the integration tests of this folder."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from escalation.bootstrap import build


@pytest.fixture()
def second_app(settings: Any, scratch: sa.Engine, redis_url: str) -> Iterator[Any]:
    """An App on a database and namespace of its own: the reference run a test compares
    its own app's writes with."""
    ns = f"t{uuid.uuid4().hex[:12]}"
    other = settings.model_copy(update={
        "database_url": scratch.url.render_as_string(hide_password=False), "namespace": ns})
    app = build(other, actor="test-worker")
    yield app
    app.close()
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(match=f"*{{{ns}:*", count=1000):
        client.delete(key)
    client.close()
