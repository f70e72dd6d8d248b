"""The HTTP surface hardened (docs/adr/0011-http-hardening.md), against a real server on
loopback: request limits, authentication before any input is read, the failed-auth
throttle, source-scoped and read-only tokens on every route naming a dispute, and console
sessions that are not tokens."""

from __future__ import annotations

import json
import os
import re
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tests.api.conftest import body, make_tokens, start_server, stop_server

OPENAPI = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
LIMIT = 5  # failed authentications per window in this module's server
WINDOW_S = 20


@dataclass
class Hard:
    url: str
    tokens: dict[str, str]
    names: dict[str, str]
    engine: sa.Engine

    def client(self, role: str | None, **headers: str) -> httpx.Client:
        if role is not None:
            headers["Authorization"] = f"Bearer {self.tokens[role]}"
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def hard(redis_url: str, database_url: str, engine: sa.Engine) -> Iterator[Hard]:
    """A server with a low throttle, a small batch limit, short console sessions, and
    tokens: per role, source-scoped (srca, srcb, srca+srcb), read-only."""
    import redis

    from escalation.adapters.token_store import PostgresTokenStore
    from escalation.service_layer.tokens import CreateToken, create_token

    namespace = f"t{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=database_url,
               ESCALATION_NAMESPACE=namespace, ESCALATION_LOG_FORMAT="json",
               ESCALATION_LOG_LEVEL="WARNING", ESCALATION_API_TOKEN_CACHE_S="0",
               ESCALATION_API_AUTH_FAIL_LIMIT=str(LIMIT),
               ESCALATION_API_AUTH_FAIL_WINDOW_S=str(WINDOW_S),
               ESCALATION_API_MAX_BATCH="50",
               ESCALATION_CONSOLE_SESSION_IDLE_S="3",
               ESCALATION_CONSOLE_SESSION_LIFETIME_S="8")
    prefix = f"hd{uuid.uuid4().hex[:8]}"
    tokens, names = make_tokens(engine, prefix)
    store = PostgresTokenStore(engine)
    for key, sources, ro in (("a", ["srca"], False), ("b", ["srcb"], False),
                             ("ab", ["srca", "srcb"], False), ("ro", None, True),
                             ("ro_a", ["srca"], True)):
        tokens[key], info = create_token(CreateToken(f"{prefix}-{key}", "service", 30,
                                                     sources=sources, read_only=ro), store)
        names[key] = info.name
    url, proc = start_server(env)
    try:
        yield Hard(url, tokens, names, engine)
    finally:
        stop_server(proc)
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        for key in client.scan_iter(match=f"*{{{namespace}:*", count=1000):
            client.delete(key)


def _addr() -> str:
    """A client address of its own (uvicorn trusts X-Forwarded-For from loopback), so one
    test's failed authentications do not throttle another's."""
    return f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"


def _raw(url: str, head: str, body: bytes = b"", timeout: float = 10) -> tuple[int, str]:
    """Send a request by hand (headers promising any Content-Length) and read the answer:
    its head and its whole body (the head alone can be longer than one segment's worth)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        data = b""
        while True:  # the whole answer: the head, then Content-Length bytes of body (or EOF)
            head_end = data.find(b"\r\n\r\n")
            if head_end >= 0:
                length = 0
                for line in data[:head_end].split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                if len(data) >= head_end + 4 + length:
                    break
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.decode("latin-1")


# --------------------------------------------------------------------------- 1. limits
def test_a_50_mb_body_is_413_before_it_is_read(hard: Hard) -> None:
    head = (f"POST /v1/escalations HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {_addr()}\r\n"
            f"Authorization: Bearer {hard.tokens['service']}\r\n"
            "Content-Type: application/json\r\nContent-Length: 52428800\r\n")
    t0 = time.monotonic()
    status, text = _raw(hard.url, head, b"{")  # the 50 MB are never sent: never waited for
    assert status == 413, text
    assert time.monotonic() - t0 < 2
    assert "api_max_body_bytes" in text and "connection: close" in text.lower()


def test_a_chunked_body_is_cut_at_the_limit(hard: Hard) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"items": ['
        for _ in range(3000):
            yield b'{"dispute_id": "x", "source_hash": "ab"},' * 10
    with hard.client("service", **{"X-Forwarded-For": _addr()}) as c:
        try:
            r = c.post("/v1/escalations/batch", content=chunks(),
                       headers={"Content-Type": "application/json"})
        except httpx.TransportError:  # the server may close before the upload ends
            pytest.skip("connection closed before the answer could be read")
        assert r.status_code == 413 and "api_max_body_bytes" in r.json()["detail"]


def test_a_million_unknown_keys_is_413_in_milliseconds(hard: Hard) -> None:
    raw = b"{" + b",".join(b'"key%d":1' % i for i in range(1_000_000)) + b"}"
    assert len(raw) > 12_000_000
    head = (f"POST /v1/escalations HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {_addr()}\r\n"
            f"Authorization: Bearer {hard.tokens['service']}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n")
    t0 = time.monotonic()
    status, text = _raw(hard.url, head, raw[:1024])
    assert status == 413, text
    assert time.monotonic() - t0 < 1


def test_a_100000_key_body_is_422_small_and_fast(hard: Hard) -> None:
    raw = b"{" + b",".join(b'"%x":1' % i for i in range(100_000)) + b"}"
    assert len(raw) < 1_048_576  # under the size limit: the key count refuses it
    with hard.client("service", **{"X-Forwarded-For": _addr()}) as c:
        t0 = time.monotonic()
        r = c.post("/v1/escalations", content=raw,
                   headers={"Content-Type": "application/json"})
        took = time.monotonic() - t0
    assert r.status_code == 422
    assert "api_max_json_keys" in r.json()["detail"]
    assert len(r.content) < 2000 and took < 1.0, (len(r.content), took)


def test_depth_batch_size_and_capped_errors(hard: Hard) -> None:
    with hard.client("service", **{"X-Forwarded-For": _addr()}) as c:
        deep = body(attributes={"a": "b"})
        deep["attributes"] = json.loads("[" * 40 + "]" * 40)
        r = c.post("/v1/escalations", json=deep)
        assert r.status_code == 422 and "api_max_json_depth" in r.json()["detail"]
        # 51 items against api_max_batch=50: refused before any item is validated
        r = c.post("/v1/escalations/batch", json={"items": [{"x": i} for i in range(51)]})
        assert r.status_code == 422
        assert r.json()["errors"] == [{"field": "items", "message": r.json()["detail"]}]
        assert "at most 50 items" in r.json()["detail"]
        # 500 unknown keys: a schema error each, the first 20 listed, all counted
        b = body()
        b.update({f"x{i}": 1 for i in range(500)})
        r = c.post("/v1/escalations", json=b)
        doc = r.json()
        assert r.status_code == 422 and len(doc["errors"]) == 20
        assert doc["error_count"] == 500 and doc["errors_truncated"] is True
        # one error: no count
        r = c.post("/v1/escalations", json=body(x0=1))
        assert r.status_code == 422 and "error_count" not in r.json()


# --------------------------------------------------------------------------- 2. auth first
def _routes() -> list[tuple[str, str]]:
    doc = json.loads(OPENAPI.read_text())
    out = []
    for path, ops in doc["paths"].items():
        concrete = re.sub(r"\{[^}]+\}", "not a uuid", path)
        out += [(m.upper(), concrete) for m in ops if m in ("get", "post")]
    return out


def test_an_anonymous_malformed_request_is_401_on_every_route(hard: Hard) -> None:
    routes = _routes()
    assert len(routes) >= 20
    with hard.client(None) as anon:
        for method, path in routes:
            if path in ("/healthz", "/livez", "/readyz"):  # anonymous probes
                continue
            r = anon.request(method, path, params={"nonsense": "1"}, content=b"{not json",
                             headers={"Content-Type": "application/json"})
            assert r.status_code == 401, (method, path, r.text)
            assert r.headers["www-authenticate"].startswith("Bearer")
            assert "errors" not in r.json()  # nothing about the schema
        # a 50 MB body from nobody: 401 before a byte of it is read (not 413)
        status, text = _raw(hard.url, "POST /v1/escalations/batch HTTP/1.1\r\nHost: x\r\n"
                            "Content-Length: 52428800\r\n")
        assert status == 401, text
    # a token of the wrong role: 403 before the body is parsed
    with hard.client("compliance") as c:
        r = c.post("/v1/escalations", content=b"{not json",
                   headers={"Content-Type": "application/json"})
        assert r.status_code == 403
    # the same request authenticated: now the body is read and refused
    with hard.client("service") as c:
        r = c.post("/v1/escalations", content=b"{not json",
                   headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body"
        assert c.get("/v1/escalations/not-a-uuid").status_code == 422
    # the wrong role on a route without a body: 403 before its path or query is validated
    with hard.client("compliance") as c:
        assert c.get("/v1/escalations/not-a-uuid", params={"x": "1"}).status_code == 403
    with hard.client("service") as c:
        assert c.get("/v1/audit", params={"from": "nonsense"}).status_code == 403


# --------------------------------------------------------------------------- 3. throttle
def test_random_tokens_from_one_address_are_throttled(hard: Hard) -> None:
    addr = _addr()
    got: list[int] = []
    t0 = time.monotonic()
    with hard.client(None, **{"X-Forwarded-For": addr}) as c:
        for _ in range(300):
            r = c.get("/v1/escalations/" + str(uuid.uuid4()),
                      headers={"Authorization": f"Bearer esc_{uuid.uuid4().hex}{'x' * 11}"})
            got.append(r.status_code)
        last = r
    assert got[:LIMIT] == [401] * LIMIT and set(got[LIMIT:]) == {429}
    assert 1 <= int(last.headers["retry-after"]) <= WINDOW_S
    assert last.json()["type"] == "/problems/too-many-requests"
    assert time.monotonic() - t0 < 30
    # another address is not throttled; a valid token from it works
    with hard.client("service", **{"X-Forwarded-For": _addr()}) as c:
        assert c.get("/readyz").status_code == 200


def test_one_token_from_many_addresses_is_throttled_by_its_prefix(hard: Hard) -> None:
    bad = f"esc_{uuid.uuid4().hex}{'y' * 11}"
    got = []
    for _ in range(LIMIT + 3):
        with hard.client(None, **{"X-Forwarded-For": _addr(),
                                  "Authorization": f"Bearer {bad}"}) as c:
            got.append(c.get("/readyz").status_code)
    assert got == [401] * LIMIT + [429] * 3


# --------------------------------------------------------------------------- 4. scopes
REG_E = {"new_account": False, "point_of_sale": False, "foreign_initiated": False}


def _credit(key: str) -> dict[str, Any]:
    at = (datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=0).isoformat()
    return {"action": "provisional_credit", "occurred_at": at, "amount": "10.00",
            "currency": "USD", "idempotency_key": key}


def _reg_e(client: httpx.Client, source: str, ext: str) -> str:
    notice = (datetime.now(UTC) - timedelta(days=2)).replace(microsecond=0).isoformat()
    r = client.post("/v1/escalations", json=body(
        dispute_id=None, source=source, external_id=ext, ladder="reg_e_error_resolution",
        due_at=None, opened_at=notice, notice_at=notice, attributes=REG_E))
    assert r.status_code == 201, r.text
    return str(r.json()["dispute_id"])


def _dispute_routes(did: str, source: str, ext: str) -> list[tuple[str, str, Any]]:
    """Every route naming a dispute, at both addresses: (method, path, json body)."""
    out: list[tuple[str, str, Any]] = []
    for base in (f"/v1/escalations/{did}", f"/v1/sources/{source}/escalations/{ext}"):
        key = uuid.uuid4().hex
        out += [("GET", base, None), ("POST", base + "/pause", {}),
                ("POST", base + "/resume", None), ("POST", base + "/cancel", {}),
                ("POST", base + "/actions", _credit(key)),
                ("POST", base + "/resolve", {"outcome": "error_corrected",
                                             "idempotency_key": key})]
    return out


def test_a_source_scoped_token_reaches_only_its_sources_disputes(hard: Hard) -> None:
    ext = f"S-{uuid.uuid4().hex[:8]}"
    with hard.client("a") as a, hard.client("b") as b, hard.client("ab") as ab:
        r = a.post("/v1/escalations", json=body(dispute_id=None, source="srca",
                                                 external_id=ext))
        assert r.status_code == 201, r.text
        did = r.json()["dispute_id"]
        # B names A's dispute on every route: by UUID it does not exist (404), by source
        # path the source is not B's (403); nothing is written
        for method, path, payload in _dispute_routes(did, "srca", ext):
            r = b.request(method, path, json=payload)
            want = 403 if "/sources/" in path else 404
            assert r.status_code == want, (method, path, r.text)
        assert a.get(f"/v1/escalations/{did}").json()["status"] == "pending"
        # A may not create in B's source, nor by UUID alone; nor in a batch
        r = a.post("/v1/escalations", json=body(dispute_id=None, source="srcb",
                                                 external_id=ext))
        assert r.status_code == 403 and "limited to sources srca" in r.json()["detail"]
        assert a.post("/v1/escalations", json=body()).status_code == 403
        r = a.post("/v1/escalations/batch", json={"items": [
            body(dispute_id=None, source="srca", external_id=ext + "x"),
            body(dispute_id=None, source="srcb", external_id=ext)]})
        assert r.status_code == 403 and r.json()["errors"][0]["field"] == "items[1].source"
        # a token of both sources, and A itself, reach the dispute
        assert ab.get(f"/v1/sources/srca/escalations/{ext}").status_code == 200
        assert a.post(f"/v1/escalations/{did}/pause", json={}).status_code == 200
        assert a.post(f"/v1/sources/srca/escalations/{ext}/resume").status_code == 200
    # an unscoped service token keeps working on every dispute
    with hard.client("service") as s:
        assert s.get(f"/v1/escalations/{did}").status_code == 200


def test_every_dispute_route_works_for_its_own_sources_token(hard: Hard) -> None:
    ext, ext2 = f"T-{uuid.uuid4().hex[:8]}", f"U-{uuid.uuid4().hex[:8]}"
    with hard.client("a") as a:
        did = _reg_e(a, "srca", ext)
        did2 = _reg_e(a, "srca", ext2)
        by_id, by_src = f"/v1/escalations/{did}", f"/v1/sources/srca/escalations/{ext}"
        steps = [("GET", by_id, None), ("GET", by_src, None),
                 ("POST", by_id + "/pause", {}), ("POST", by_src + "/resume", None),
                 ("POST", by_src + "/pause", {}), ("POST", by_id + "/resume", None),
                 ("POST", by_id + "/actions", _credit("k1")),
                 ("POST", by_src + "/actions", _credit("k2")),
                 ("POST", by_src + "/resolve", {"outcome": "error_corrected",
                                                "idempotency_key": "r1"}),
                 ("POST", f"/v1/escalations/{did2}/cancel", {}),
                 ("POST", f"/v1/sources/srca/escalations/{ext2}/cancel", {})]
        for method, path, payload in steps:
            r = a.request(method, path, json=payload)
            assert r.status_code in (200, 201), (method, path, r.text)
        assert a.get(by_id).json()["status"] == "resolved"


def test_a_read_only_token_reads_but_never_writes(hard: Hard) -> None:
    ext = f"R-{uuid.uuid4().hex[:8]}"
    with hard.client("a") as a:
        did = _reg_e(a, "srca", ext)
    for role in ("ro", "ro_a"):
        with hard.client(role) as ro:
            for method, path, payload in _dispute_routes(did, "srca", ext):
                r = ro.request(method, path, json=payload)
                if method == "GET":
                    assert r.status_code == 200, (role, path, r.text)
                else:
                    assert r.status_code == 403, (role, path, r.text)
                    assert "read-only" in r.json()["detail"]
            assert ro.post("/v1/escalations", json=body()).status_code == 403


def test_token_list_shows_every_scope(hard: Hard, redis_url: str) -> None:
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_DATABASE_URL=str(hard.engine.url.render_as_string(False)),
               ESCALATION_REDIS_URL=redis_url)
    out = subprocess.run([sys.executable, "-m", "escalation", "token", "list", "--json"],
                         env=env,
                         capture_output=True, text=True, timeout=60, check=True)
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows[hard.names["a"]]["sources"] == ["srca"]
    assert rows[hard.names["ab"]]["scope"] == "sources: srca, srcb; read-write"
    assert rows[hard.names["ro"]]["scope"] == "unscoped (every source); read-only"
    assert rows[hard.names["service"]]["scope"] == "unscoped (every source); read-write"
    assert rows[hard.names["service"]]["sources"] is None


# --------------------------------------------------------------------------- 5. sessions
#: the clients ``_sign_in`` opened in the running test; ``_close_signed_in`` closes them
_SIGNED_IN: list[httpx.Client] = []


@pytest.fixture(autouse=True)
def _close_signed_in() -> Iterator[None]:
    """Close every client a test signed in with (an unclosed one is a ResourceWarning when
    it is collected, and warnings are errors)."""
    yield
    while _SIGNED_IN:
        _SIGNED_IN.pop().close()


def _sign_in(hard: Hard, role: str = "compliance") -> httpx.Client:
    c = httpx.Client(base_url=hard.url, timeout=30, follow_redirects=False,
                     headers={"X-Forwarded-For": _addr()})
    _SIGNED_IN.append(c)
    c.get("/console/login")
    r = c.post("/console/login", data={"token": hard.tokens[role],
                                       "csrf": c.cookies["esc_console_login"],
                                       "next": "/console/audit"})
    assert r.status_code == 303, r.text
    return c


def test_the_console_cookie_is_a_session_never_a_token(hard: Hard) -> None:
    c = _sign_in(hard)
    sid = c.cookies["esc_console"]
    assert sid.startswith("ses_") and sid != hard.tokens["compliance"]
    assert c.get("/console/audit").status_code == 200
    with hard.client(None) as anon:
        r = anon.get("/v1/audit", headers={"Authorization": f"Bearer {sid}"})
        assert r.status_code == 401
    # a second sign-in from the same browser gets a new id; the old one is ended
    c.get("/console/login")
    c.post("/console/login", data={"token": hard.tokens["compliance"],
                                   "csrf": c.cookies["esc_console_login"]})
    assert c.cookies["esc_console"] != sid
    r = httpx.get(hard.url + "/console/audit", cookies={"esc_console": sid})
    assert r.status_code == 303
    # sign-out ends the session on the server: a copy of the cookie stops working
    copy = c.cookies["esc_console"]
    page = c.get("/console/audit").text
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert csrf is not None
    assert c.post("/console/logout", data={"csrf": csrf.group(1)}).status_code == 303
    r = httpx.get(hard.url + "/console/deadlines.csv", cookies={"esc_console": copy})
    assert r.status_code == 303 and "/console/login" in r.headers["location"]


def test_sessions_expire_idle_and_absolute_and_with_their_token(hard: Hard) -> None:
    c = _sign_in(hard)
    assert c.get("/console/deadlines.csv").status_code == 200
    time.sleep(4)  # idle 3 s
    assert c.get("/console/deadlines.csv").status_code == 303
    # active all along, still ended at the absolute lifetime (8 s)
    c = _sign_in(hard)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 7:
        assert c.get("/console/deadlines.csv").status_code == 200
        time.sleep(1.5)
    time.sleep(1.5)
    assert c.get("/console/deadlines.csv").status_code == 303
    # revoking the token ends its sessions
    from escalation.adapters.token_store import PostgresTokenStore
    from escalation.service_layer.tokens import CreateToken, create_token, revoke_token

    store = PostgresTokenStore(hard.engine)
    secret, info = create_token(CreateToken(f"sess{uuid.uuid4().hex[:8]}", "compliance", 1), store)
    hard.tokens["temp"] = secret
    c = _sign_in(hard, "temp")
    assert c.get("/console/deadlines.csv").status_code == 200
    revoke_token(store, info.name)
    assert c.get("/console/deadlines.csv").status_code == 303
    with hard.engine.connect() as conn:
        why = conn.execute(sa.text("SELECT ended_why FROM console_sessions WHERE token_name "
                                   "= :n"), {"n": info.name}).scalar_one()
    assert why == "token_revoked"


def test_failed_console_sign_ins_are_throttled(hard: Hard) -> None:
    c = httpx.Client(base_url=hard.url, timeout=30, headers={"X-Forwarded-For": _addr()})
    _SIGNED_IN.append(c)
    c.get("/console/login")
    codes = []
    for _ in range(LIMIT + 2):
        r = c.post("/console/login", data={"token": f"esc_{uuid.uuid4().hex}",
                                           "csrf": c.cookies["esc_console_login"]})
        codes.append(r.status_code)
    assert codes == [401] * LIMIT + [429] * 2 and int(r.headers["retry-after"]) >= 1


# --------------------------------------------------------------------------- 6. rotation
ROTATE_S, GRACE_S, LIFETIME_S = 2, 2, 10


@pytest.fixture(scope="module")
def rotating(redis_url: str, database_url: str, engine: sa.Engine) -> Iterator[Hard]:
    """A server whose console session ids rotate every 2 s (grace 2 s), sessions end 10 s
    after sign-in, and a live session is cached up to 60 s (so a cache that outlived a
    rotation would show)."""
    namespace = f"t{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=database_url,
               ESCALATION_NAMESPACE=namespace, ESCALATION_LOG_FORMAT="json",
               ESCALATION_LOG_LEVEL="WARNING", ESCALATION_API_TOKEN_CACHE_S="60",
               ESCALATION_CONSOLE_SESSION_IDLE_S="300",
               ESCALATION_CONSOLE_SESSION_LIFETIME_S=str(LIFETIME_S),
               ESCALATION_CONSOLE_SESSION_ROTATE_S=str(ROTATE_S),
               ESCALATION_CONSOLE_SESSION_ROTATE_GRACE_S=str(GRACE_S))
    tokens, names = make_tokens(engine, f"ro{uuid.uuid4().hex[:8]}")
    url, proc = start_server(env)
    try:
        yield Hard(url, tokens, names, engine)
    finally:
        stop_server(proc)


def _row(engine: sa.Engine, sid: str) -> Any:
    from escalation.service_layer.sessions import session_digest

    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT ended_why, expires_at FROM console_sessions "
                                    "WHERE id_sha256 = :d"), {"d": session_digest(sid)}).one()


def test_a_session_id_rotates_the_old_one_dies_and_the_lifetime_stays(rotating: Hard) -> None:
    t0 = time.monotonic()
    c = _sign_in(rotating)
    sid0 = c.cookies["esc_console"]
    r = c.get("/console/deadlines.csv")
    assert r.status_code == 200 and "set-cookie" not in r.headers  # not due yet
    time.sleep(ROTATE_S + 0.3)
    r = c.get("/console/deadlines.csv")
    assert r.status_code == 200
    cookie = r.headers["set-cookie"]
    sid1 = c.cookies["esc_console"]
    assert sid1.startswith("ses_") and sid1 != sid0 and f"esc_console={sid1}" in cookie
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
    assert "Secure" not in cookie  # plain HTTP here
    old = {"esc_console": sid0}
    # a request of the same page load still on its way with the old id: within the grace
    assert httpx.get(rotating.url + "/console/deadlines.csv", cookies=old).status_code == 200
    time.sleep(GRACE_S + 0.5)
    r = httpx.get(rotating.url + "/console/deadlines.csv", cookies=old)
    assert r.status_code == 303 and "/console/login" in r.headers["location"]
    assert r.headers.get("set-cookie") is None
    ended, expires0 = _row(rotating.engine, sid0)
    assert ended == "rotated" and _row(rotating.engine, sid1)[1] == expires0
    # browsing on keeps rotating; the absolute end of the sign-in still holds
    seen = {sid0, sid1}
    while time.monotonic() - t0 < LIFETIME_S - 1.5:
        assert c.get("/console/deadlines.csv").status_code == 200
        seen.add(c.cookies["esc_console"])
        time.sleep(0.7)
    assert len(seen) >= 3
    assert _row(rotating.engine, c.cookies["esc_console"])[1] == expires0
    time.sleep(max(0.0, LIFETIME_S + 1 - (time.monotonic() - t0)))
    r = c.get("/console/deadlines.csv")
    assert r.status_code == 303 and "/console/login" in r.headers["location"]


def test_no_process_serves_a_rotated_away_id_from_its_cache(engine: sa.Engine) -> None:
    """Two processes' caches (60 s) on one store: the one that did not rotate the id stops
    accepting it when the grace ends, though it had it cached."""
    from escalation.adapters.token_store import PostgresSessionStore, PostgresTokenStore
    from escalation.entrypoints.api.auth import SessionCache
    from escalation.service_layer.tokens import CreateToken, create_token

    _secret, info = create_token(CreateToken(f"rc{uuid.uuid4().hex[:8]}", "compliance", 1),
                                 PostgresTokenStore(engine))
    store = PostgresSessionStore(engine)
    one, two = (SessionCache(store, 60, 300, ROTATE_S, 1) for _ in range(2))
    sid0 = one.sign_in(info, 60, None)
    assert one.check(sid0) == (info, None)  # cached by process one
    time.sleep(ROTATE_S + 0.2)
    got = two.check(sid0)
    assert got is not None and got[1] is not None and got[1] != sid0
    assert one.check(sid0) == (info, None)  # in the grace
    time.sleep(1.3)
    assert one.check(sid0) is None and two.check(sid0) is None
    assert one.check(got[1]) == (info, None)
