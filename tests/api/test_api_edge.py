"""The API's edge, on a real ``escalation serve`` (real Redis behind a TCP proxy, real
PostgreSQL): access log lines, request ids, HTTP metrics, probes without a token, 503s with
``Retry-After`` and no internal address, load shedding, and a clean exit on SIGTERM after
the requests in flight are answered."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import sqlalchemy as sa
from redis.connection import parse_url

from tests.api.conftest import body, make_tokens, start_server, stop_server
from tests.fault.proxy import TcpProxy

MAX_IN_FLIGHT = 3


@dataclass
class Edge:
    """A server whose Redis is reached through ``proxy`` and whose log is kept."""

    url: str
    env: dict[str, str]
    tokens: dict[str, str]
    names: dict[str, str]
    proc: Any
    proxy: TcpProxy

    def client(self, role: str | None = "service", **headers: str) -> httpx.Client:
        if role is not None:
            headers["Authorization"] = f"Bearer {self.tokens[role]}"
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def log_lines(self) -> list[dict[str, Any]]:
        """The server's JSON log lines so far (other lines skipped)."""
        log = self.proc.log_file
        log.seek(0)
        out = []
        for line in log.read().decode(errors="replace").splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def log_text(self) -> str:
        log = self.proc.log_file
        log.seek(0)
        return str(log.read().decode(errors="replace"))


def _env(redis_url: str, database_url: str, namespace: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=database_url,
               ESCALATION_NAMESPACE=namespace, ESCALATION_LOG_FORMAT="json",
               ESCALATION_LOG_LEVEL="INFO", ESCALATION_API_TOKEN_CACHE_S="0",
               ESCALATION_API_AUTH_FAIL_LIMIT="1000000",
               ESCALATION_API_MAX_IN_FLIGHT=str(MAX_IN_FLIGHT))
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def edge(redis_url: str, database_url: str, engine: sa.Engine) -> Iterator[Edge]:
    kw = parse_url(redis_url)
    proxy = TcpProxy(str(kw.get("host", "127.0.0.1")), int(kw.get("port", 6379)))
    proxy.start()
    # the same server through the proxy, with its credentials (the embedded Valkey has a
    # generated password) and its database index
    parts = urlsplit(redis_url)
    auth = parts.netloc.rpartition("@")[0]
    proxied = urlunsplit((parts.scheme, (f"{auth}@" if auth else "") + f"127.0.0.1:{proxy.port}",
                          f"/{kw.get('db', 9)}", "", ""))
    namespace = f"t{uuid.uuid4().hex[:12]}"
    env = _env(proxied, database_url, namespace)
    tokens, names = make_tokens(engine, f"edge{uuid.uuid4().hex[:8]}")
    url, proc = start_server(env)
    try:
        yield Edge(url, env, tokens, names, proc, proxy)
    finally:
        proxy.refuse = False
        stop_server(proc)
        proxy.stop()
        import redis

        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(match=f"*{{{namespace}:*", count=1000):
            client.delete(key)
        client.close()


def _access(edge: Edge, request_id: str) -> list[dict[str, Any]]:
    for _ in range(50):  # the line is written right after the response is sent
        lines = [ln for ln in edge.log_lines() if ln.get("request_id") == request_id]
        if any(ln["event"] == "http.request" for ln in lines):
            return lines
        time.sleep(0.1)
    raise AssertionError(f"no access line for {request_id}: {edge.log_text()[-2000:]}")


def test_one_access_line_per_request_with_route_template_status_duration_and_token_name(
        edge: Edge) -> None:
    did = uuid.uuid4()
    with edge.client("service", **{"X-Request-ID": "req-42.a:b_c"}) as c:
        r = c.get(f"/v1/escalations/{did}")
    assert r.status_code == 404
    assert r.headers["x-request-id"] == "req-42.a:b_c"
    [line] = [ln for ln in _access(edge, "req-42.a:b_c") if ln["event"] == "http.request"]
    assert line["route"] == "/v1/escalations/{dispute_id}"  # the template, not the id
    assert line["method"] == "GET" and line["status"] == 404
    assert isinstance(line["duration_ms"], float) and 0 < line["duration_ms"] < 30_000
    assert line["token"] == edge.names["service"]
    assert line["level"] == "info" and line["logger"] == "escalation.api.access"
    assert str(did) not in json.dumps(line)
    # the secret is in no log line at all
    assert edge.tokens["service"] not in edge.log_text()


def test_an_unsafe_or_overlong_request_id_is_replaced_by_a_new_one(edge: Edge) -> None:
    for bad in ("has space", "x" * 129, "quote\"s", "semi;colon"):
        with edge.client(None, **{"X-Request-ID": bad}) as c:
            r = c.get("/livez")
        assert r.status_code == 200
        got = r.headers["x-request-id"]
        assert got != bad and re.fullmatch(r"[0-9a-f]{32}", got), got
        assert bad not in edge.log_text()
    with edge.client(None) as c:  # none sent: one is made, and each request has its own
        ids = {c.get("/livez").headers["x-request-id"] for _ in range(3)}
    assert len(ids) == 3


def test_an_unrouted_path_is_logged_and_counted_as_unmatched(edge: Edge) -> None:
    with edge.client("service", **{"X-Request-ID": "scan-1"}) as c:
        assert c.get(f"/wp-admin/{uuid.uuid4()}.php").status_code == 404
    [line] = [ln for ln in _access(edge, "scan-1") if ln["event"] == "http.request"]
    assert line["route"] == "unmatched"


def _metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_http_metrics_count_requests_by_route_template_method_and_status(edge: Edge) -> None:
    name = "escalation_http_requests_total"
    route = "/v1/escalations/{dispute_id}"
    with edge.client("admin") as c:
        before = c.get("/metrics").text
        for _ in range(3):
            assert c.get(f"/v1/escalations/{uuid.uuid4()}").status_code == 404
        after = c.get("/metrics").text
    assert (_metric(after, name, route=route, method="GET", status="404")
            - _metric(before, name, route=route, method="GET", status="404")) == 3
    hist = "escalation_http_request_duration_seconds_count"
    assert (_metric(after, hist, route=route, method="GET")
            - _metric(before, hist, route=route, method="GET")) == 3
    assert "escalation_http_requests_shed_total" in after
    assert "/v1/escalations/" + "0" not in after  # no raw path in a label


def test_probes_answer_without_a_token_and_say_only_up_or_down(edge: Edge) -> None:
    with edge.client(None) as anon:
        for path in ("/livez", "/healthz"):
            r = anon.get(path)
            assert (r.status_code, r.json()) == (200, {"status": "ok"}), path
            assert anon.head(path).status_code == 200
        r = anon.get("/readyz")
        assert (r.status_code, r.json()) == (200, {"status": "ready"})
    # a compliance token (not only service/admin) sees the details
    with edge.client("compliance") as c:
        r = c.get("/readyz")
    assert r.status_code == 200
    assert r.json()["checks"] == {"redis": "ok", "postgres": "ok", "ladders": "ok"}
    # a bad token is still refused, never silently treated as anonymous
    with httpx.Client(base_url=edge.url, timeout=30,
                      headers={"Authorization": "Bearer esc_nope"}) as bad:
        assert bad.get("/readyz").status_code == 401


def test_a_redis_outage_is_a_503_with_retry_after_and_no_internal_address(
        edge: Edge) -> None:
    port = str(edge.proxy.port)
    edge.proxy.refuse = True
    edge.proxy.drop_all()
    try:
        with edge.client(None) as anon:
            r = anon.get("/readyz")
        assert r.status_code == 503
        assert r.json() == {"status": "not ready"}
        assert int(r.headers["retry-after"]) >= 1
        with edge.client("admin") as c:
            r = c.get("/readyz")
            assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
            assert r.json()["checks"]["redis"] == "unreachable"
            assert r.json()["checks"]["postgres"] == "ok"
            assert port not in r.text and "127.0.0.1" not in r.text
            rid = "outage-1"
            r = c.post("/v1/escalations", json=body(), headers={
                "X-Request-ID": rid, "Authorization": f"Bearer {edge.tokens['service']}"})
        assert r.status_code == 503, r.text
        assert r.headers["content-type"] == "application/problem+json"
        assert int(r.headers["retry-after"]) >= 1
        assert r.json()["type"] == "/problems/unavailable"
        assert "redis" in r.json()["detail"]
        assert port not in r.text and "127.0.0.1" not in r.text and "Error" not in r.text
    finally:
        edge.proxy.refuse = False
    # the outage is in the log, with the request id on every line of that request
    lines = _access(edge, rid)
    events = {ln["event"] for ln in lines}
    assert {"api.backing_service_unavailable", "http.request"} <= events, lines
    [access] = [ln for ln in lines if ln["event"] == "http.request"]
    assert access["status"] == 503 and access["level"] == "warning"
    with edge.client("service") as c:  # and it recovers by itself
        deadline = time.monotonic() + 20
        while c.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.2)


def _slow_post(url: str, token: str, payload: bytes, *, rid: str) -> socket.socket:
    """A POST whose headers and first half of body are sent, the rest held back: the request
    is in flight (its handler waits for the body) until :func:`_finish` sends the rest."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80),
                                    timeout=30)
    head = (f"POST /v1/escalations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nX-Request-ID: {rid}\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n").encode()
    sock.sendall(head + payload[: len(payload) // 2])
    return sock


def _finish(sock: socket.socket, payload: bytes) -> int:
    """Send the rest of the body; the response's status code."""
    sock.sendall(payload[len(payload) // 2:])
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    return int(data.split(b" ", 2)[1])


def _wait_in_flight(edge_url: str, token: str, n: int) -> None:
    """Wait until the server reports ``n`` requests in flight (the held ones)."""
    deadline = time.monotonic() + 20
    with httpx.Client(base_url=edge_url, headers={"Authorization": f"Bearer {token}"},
                      timeout=30) as c:
        while True:
            text = c.get("/metrics").text  # /metrics itself is one more in flight
            if _metric(text, "escalation_http_requests_in_flight") >= n + 1:
                return
            assert time.monotonic() < deadline, "held requests never reached the app"
            time.sleep(0.1)


def test_beyond_max_in_flight_requests_are_shed_with_503_and_retry_after(
        edge: Edge, engine: sa.Engine) -> None:
    payloads = [json.dumps(body()).encode() for _ in range(MAX_IN_FLIGHT - 1)]
    held = [_slow_post(edge.url, edge.tokens["service"], p, rid=f"held-{i}")
            for i, p in enumerate(payloads)]
    _wait_in_flight(edge.url, edge.tokens["compliance"], MAX_IN_FLIGHT - 1)
    # one place left: taken by a third held request, then the next is shed
    extra = json.dumps(body()).encode()
    held.append(_slow_post(edge.url, edge.tokens["service"], extra, rid="held-last"))
    payloads.append(extra)
    with edge.client("compliance") as c:  # once it is in the app, anything more is shed
        deadline = time.monotonic() + 20
        while c.get("/metrics").status_code != 503:
            assert time.monotonic() < deadline, "the third held request never reached the app"
            time.sleep(0.1)
    shed_body = body()
    with edge.client("service", **{"X-Request-ID": "shed-1"}) as c:
        r = c.post("/v1/escalations", json=shed_body)
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "1"
    assert r.headers["x-request-id"] == "shed-1"
    assert r.json()["type"] == "/problems/unavailable"
    assert "api_max_in_flight" in r.json()["detail"]
    with edge.client(None) as anon:  # probes are never shed
        assert anon.get("/livez").status_code == 200
        assert anon.get("/readyz").status_code == 200
    # the held requests are answered once their bodies arrive; the shed one wrote nothing
    assert [_finish(s, p) for s, p in zip(held, payloads, strict=True)] == [201] * len(held)
    with engine.connect() as conn:
        n = conn.execute(sa.text("SELECT count(*) FROM escalation_state WHERE dispute_id = "
                                 ":d"), {"d": shed_body["dispute_id"]}).scalar_one()
    assert n == 0
    # shed requests are logged at most once a second, with how many were shed
    shed_lines = [ln for ln in edge.log_lines() if ln.get("shed") is True]
    assert shed_lines and all(ln["status"] == 503 and ln["event"] == "http.request"
                              and ln["level"] == "warning" for ln in shed_lines)
    assert sum(ln["shed_count"] for ln in shed_lines) >= 1
    with edge.client("compliance") as c:
        assert _metric(c.get("/metrics").text, "escalation_http_requests_shed_total") >= 1
        r = c.post("/v1/escalations", json=body(), headers={
            "Authorization": f"Bearer {edge.tokens['service']}"})
    assert r.status_code == 201  # room again


def test_traceparent_trace_id_is_recorded_on_the_ledger_row(edge: Edge) -> None:
    trace = uuid.uuid4().hex
    b = body()
    with edge.client("service", traceparent=f"00-{trace}-00f067aa0ba902b7-01") as c:
        r = c.post("/v1/escalations", json=b)
        assert r.status_code == 201, r.text
        assert r.json()["trace_id"] == trace
        b2 = body(trace_id="mine-1")  # a trace id in the body wins
        assert c.post("/v1/escalations", json=b2).json()["trace_id"] == "mine-1"
        got = c.get(f"/v1/escalations/{b['dispute_id']}").json()
    assert got["trace_id"] == trace
    with edge.client("service", traceparent="00-" + "0" * 32 + "-00f067aa0ba902b7-01") as c:
        r = c.post("/v1/escalations", json=body())  # an invalid traceparent is ignored
    assert r.status_code == 201 and r.json()["trace_id"] != "0" * 32


def test_serve_exits_0_on_sigterm_after_answering_the_requests_in_flight(
        redis_url: str, database_url: str, engine: sa.Engine) -> None:
    namespace = f"t{uuid.uuid4().hex[:12]}"
    tokens, _ = make_tokens(engine, f"term{uuid.uuid4().hex[:8]}")
    url, proc = start_server(_env(redis_url, database_url, namespace))
    try:
        payload = json.dumps(body()).encode()
        sock = _slow_post(url, tokens["service"], payload, rid="drain-1")
        _wait_in_flight(url, tokens["compliance"], 1)
        proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        assert proc.poll() is None  # still draining: the held request is not answered yet
        with pytest.raises(httpx.TransportError):  # no new connection is accepted
            httpx.get(url + "/livez", timeout=2)
        assert _finish(sock, payload) == 201
        assert proc.wait(30) == 0
    finally:
        stop_server(proc)  # kills it if still running; closes its log either way
        import redis

        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(match=f"*{{{namespace}:*", count=1000):
            client.delete(key)
        client.close()


def test_traceparent_of_the_creating_call_is_in_the_worker_log_lines_of_its_decision(
        edge: Edge) -> None:
    from datetime import UTC, datetime, timedelta

    from tests.helpers import run_cli

    trace = uuid.uuid4().hex
    due = datetime.now(UTC) + timedelta(seconds=2)
    b = body(due_at=due.isoformat())
    with edge.client("service", traceparent=f"00-{trace}-00f067aa0ba902b7-01") as c:
        assert c.post("/v1/escalations", json=b).status_code == 201
    time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()) + 1.0)
    env = {**edge.env, "ESCALATION_LOG_LEVEL": "DEBUG"}
    res = run_cli(env, "worker", "--burst")
    assert res.returncode == 0, res.stderr
    lines = [json.loads(ln) for ln in res.stderr.splitlines() if ln.startswith("{")]
    mine = [ln for ln in lines if ln.get("dispute_id") == b["dispute_id"]]
    assert mine, res.stderr[-3000:]
    assert all(ln.get("trace_id") == trace for ln in mine), mine
    assert any(ln.get("match_decision", "").startswith("PROMOTED") for ln in mine), mine


def test_every_server_log_line_is_json(edge: Edge) -> None:
    # uvicorn's own records go through the one log configuration; only the listen banner
    # (written before logging is configured for the server) is plain text
    text = edge.log_text()
    other = [ln for ln in text.splitlines()
             if ln.strip() and not ln.startswith("{") and not ln.startswith("escalation serve: ")]
    assert other == [], other[:5]


def test_with_two_worker_processes_a_scrape_counts_the_requests_of_both(
        redis_url: str, database_url: str, engine: sa.Engine, tmp_path: Any) -> None:
    namespace = f"t{uuid.uuid4().hex[:12]}"
    tokens, _ = make_tokens(engine, f"mp{uuid.uuid4().hex[:8]}")
    # the figures' directory named by the operator (serve makes one of its own otherwise)
    url, proc = start_server(_env(redis_url, database_url, namespace,
                                  ESCALATION_API_MAX_IN_FLIGHT="1000",
                                  PROMETHEUS_MULTIPROC_DIR=str(tmp_path)), workers=2)
    route = "/v1/escalations/{dispute_id}"
    try:
        n = 40
        for _ in range(n):  # a new connection each: the kernel spreads them over both
            r = httpx.get(f"{url}/v1/escalations/{uuid.uuid4()}",
                          headers={"Authorization": f"Bearer {tokens['service']}"})
            assert r.status_code == 404
        seen = set()
        for _ in range(6):  # whichever process answers the scrape, it counts all n
            r = httpx.get(url + "/metrics",
                          headers={"Authorization": f"Bearer {tokens['compliance']}"})
            assert r.status_code == 200
            assert _metric(r.text, "escalation_http_requests_total", route=route,
                           method="GET", status="404") == n
            seen.add(r.headers["x-request-id"])
        assert len(seen) == 6
        # both processes served some of them (each writes its own counter file)
        pids = {f.name.rsplit("_", 1)[1] for f in tmp_path.glob("counter_*.db")}
        assert len(pids) == 2, sorted(f.name for f in tmp_path.iterdir())
    finally:
        stop_server(proc)
        import redis

        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(match=f"*{{{namespace}:*", count=1000):
            client.delete(key)
        client.close()
