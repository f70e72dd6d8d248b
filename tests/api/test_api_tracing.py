"""OpenTelemetry tracing of the API (the ``otel`` extra), on the real app in process (real
Redis and PostgreSQL) with the SDK's in-memory exporter: one SERVER span per request named
by its route template, the W3C ``traceparent`` as parent, a ``ledger.write`` child around the
create's write, and the trace id on the ledger row."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from starlette.testclient import TestClient

from escalation.domain.access import Role
from tests.api.conftest import body


@pytest.fixture()
def traced(settings: Any, engine: sa.Engine, redis_client: Any,
           ) -> Iterator[tuple[TestClient, InMemorySpanExporter, str]]:
    from escalation.adapters.token_store import PostgresTokenStore
    from escalation.entrypoints.api.app import create_app
    from escalation.service_layer.tokens import CreateToken, create_token

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    secret, info = create_token(
        CreateToken(f"trace{uuid.uuid4().hex[:8]}", Role.SERVICE.value, 1),
        PostgresTokenStore(engine))
    app = create_app(settings, tracer_provider=provider)
    with TestClient(app, headers={"Authorization": f"Bearer {secret}"}) as client:
        yield client, exporter, info.name
    provider.shutdown()


def test_one_server_span_per_request_with_route_and_a_ledger_write_child(
        traced: tuple[TestClient, InMemorySpanExporter, str]) -> None:
    client, exporter, _ = traced
    trace = uuid.uuid4().hex
    parent = "00f067aa0ba902b7"
    b = body()
    r = client.post("/v1/escalations", json=b,
                    headers={"traceparent": f"00-{trace}-{parent}-01"})
    assert r.status_code == 201, r.text
    spans = exporter.get_finished_spans()
    [server] = [s for s in spans if s.kind is SpanKind.SERVER]
    assert server.name == "POST /v1/escalations"
    assert server.attributes is not None
    assert server.attributes["http.route"] == "/v1/escalations"
    assert server.attributes["http.response.status_code"] == 201
    assert server.attributes["escalation.request_id"] == r.headers["x-request-id"]
    assert format(server.context.trace_id, "032x") == trace  # the caller's trace
    assert server.parent is not None and format(server.parent.span_id, "016x") == parent
    [write] = [s for s in spans if s.name == "ledger.write"]
    assert write.parent is not None and write.parent.span_id == server.context.span_id
    assert write.context.trace_id == server.context.trace_id
    # the ledger row carries the trace id
    assert r.json()["trace_id"] == trace
    got = client.get(f"/v1/escalations/{b['dispute_id']}").json()
    assert got["trace_id"] == trace


def test_without_traceparent_the_new_trace_id_is_the_escalation_trace_id(
        traced: tuple[TestClient, InMemorySpanExporter, str]) -> None:
    client, exporter, _ = traced
    r = client.post("/v1/escalations", json=body())
    assert r.status_code == 201
    [server] = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert server.parent is None
    assert r.json()["trace_id"] == format(server.context.trace_id, "032x")


def test_a_batch_write_is_a_child_span_and_a_route_template_names_each_span(
        traced: tuple[TestClient, InMemorySpanExporter, str]) -> None:
    client, exporter, _ = traced
    r = client.post("/v1/escalations/batch", json={"items": [body(), body()]})
    assert r.status_code == 200, r.text
    did = uuid.uuid4()
    assert client.get(f"/v1/escalations/{did}").status_code == 404
    spans = exporter.get_finished_spans()
    names = [s.name for s in spans if s.kind is SpanKind.SERVER]
    assert names == ["POST /v1/escalations/batch", "GET /v1/escalations/{dispute_id}"]
    assert str(did) not in " ".join(s.name for s in spans)
    [write] = [s for s in spans if s.name == "ledger.write"]
    assert write.attributes is not None and write.attributes["items"] == 2


def test_every_ledger_write_route_has_a_ledger_write_child_span(
        traced: tuple[TestClient, InMemorySpanExporter, str]) -> None:
    client, exporter, _ = traced
    b = body()
    assert client.post("/v1/escalations", json=b).status_code == 201
    did = b["dispute_id"]
    for step in ("pause", "resume", "cancel"):
        assert client.post(f"/v1/escalations/{did}/{step}").status_code == 200, step
    spans = exporter.get_finished_spans()
    servers = {s.context.span_id: s for s in spans if s.kind is SpanKind.SERVER}
    writes = [s for s in spans if s.name == "ledger.write"]
    assert [w.attributes["operation"] for w in writes if w.attributes] == [
        "create", "pause", "resume", "cancel"]
    for w in writes:  # each under its own request's span, run in the thread pool or not
        assert w.parent is not None and w.parent.span_id in servers
    assert len({w.parent.span_id for w in writes if w.parent}) == 4
    names = [servers[w.parent.span_id].name for w in writes if w.parent]
    assert names[1:] == [f"POST /v1/escalations/{{dispute_id}}/{s}"
                         for s in ("pause", "resume", "cancel")]


def test_a_5xx_marks_the_span_as_an_error(
        traced: tuple[TestClient, InMemorySpanExporter, str]) -> None:
    client, exporter, _ = traced
    app: Any = client.app
    core = app.state.core

    def down() -> None:
        import redis.exceptions

        raise redis.exceptions.ConnectionError("Error 111 connecting to 10.0.0.9:6379.")

    real = core.redis.ping
    core.redis.ping = down
    try:
        r = client.get("/readyz")
    finally:
        core.redis.ping = real
    assert r.status_code == 503 and "10.0.0.9" not in r.text
    [server] = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert server.name == "GET /readyz"
    assert server.status.status_code is StatusCode.ERROR


def test_tracing_is_off_without_an_endpoint_and_asks_for_the_extra_with_one() -> None:
    from escalation.domain.errors import ConfigError
    from escalation.entrypoints.api import edge as tracing

    assert tracing.tracer_provider(None) is None
    provider = tracing.tracer_provider("http://127.0.0.1:1/v1/traces")
    try:
        assert provider is not None
    finally:
        provider.shutdown()
    import builtins

    real_import = builtins.__import__

    def no_otel(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("opentelemetry.exporter"):
            raise ImportError(name=name)
        return real_import(name, *args, **kwargs)

    builtins.__import__ = no_otel
    try:
        with pytest.raises(ConfigError, match=r"escalation\[otel\]"):
            tracing.tracer_provider("http://127.0.0.1:1/v1/traces")
    finally:
        builtins.__import__ = real_import


@pytest.mark.parametrize(("header", "expected"), [
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
     "4bf92f3577b34da6a3ce929d0e0e4736"),
    ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-00",
     "4bf92f3577b34da6a3ce929d0e0e4736"),
    ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None),
    ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", None),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", None),
    ("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", None),
    ("garbage", None), ("", None)])
def test_traceparent_parsing(header: str, expected: str | None) -> None:
    from escalation.entrypoints.api.edge import parse_traceparent

    assert parse_traceparent(header.encode()) == expected
