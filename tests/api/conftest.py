"""A real uvicorn server (``escalation serve``) on a free loopback port, on the test Redis
and PostgreSQL, with one token per role (plus an expired and a revoked one)."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A running API server and what tests need to talk to it."""

    url: str
    namespace: str
    env: dict[str, str]
    tokens: dict[str, str]
    names: dict[str, str]
    proc: subprocess.Popen[bytes]

    def client(self, role: str | None = "service") -> httpx.Client:
        headers = {} if role is None else {"Authorization": f"Bearer {self.tokens[role]}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


def make_tokens(engine: sa.Engine, prefix: str) -> tuple[dict[str, str], dict[str, str]]:
    """Tokens for service/compliance/admin, plus 'expired' and 'revoked' (service role)."""
    from escalation.adapters.token_store import PostgresTokenStore
    from escalation.service_layer.tokens import CreateToken, create_token, digest, revoke_token

    store = PostgresTokenStore(engine)
    tokens: dict[str, str] = {}
    names: dict[str, str] = {}
    for role in ("service", "compliance", "admin"):
        name = f"{prefix}-{role}"
        tokens[role], _ = create_token(CreateToken(name, role, 30), store)
        names[role] = name
    secret, info = create_token(CreateToken(f"{prefix}-revoked", "service", 30), store)
    revoke_token(store, info.name)
    tokens["revoked"], names["revoked"] = secret, info.name
    from escalation.domain.access import Role
    from escalation.ports import NewToken

    expired_secret = "esc_" + uuid.uuid4().hex + uuid.uuid4().hex[:11]
    store.insert(NewToken(f"{prefix}-expired", Role.SERVICE, digest(expired_secret),
                          store.now() - timedelta(seconds=1)))
    tokens["expired"], names["expired"] = expired_secret, f"{prefix}-expired"
    return tokens, names


def start_server(env: dict[str, str], workers: int = 1) -> tuple[str, subprocess.Popen[bytes]]:
    """``escalation serve`` on a free loopback port (the benchmark's own starter). A first
    start on a new database writes the ladders' baseline events: on a shared 2-core machine
    at load 10 it took over 60 s, hence the wait."""
    from escalation.bench.api import start_api_server

    return start_api_server(env, workers, timeout_s=180)


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server of :func:`start_server` and close its log file."""
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    log = getattr(proc, "log_file", None)  # start_api_server's temporary log file
    if log is not None:
        log.close()


@pytest.fixture(scope="module")
def api_server(redis_url: str, database_url: str, engine: sa.Engine) -> Iterator[Server]:
    """One server per test module, in its own Redis namespace."""
    import redis

    namespace = f"t{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=database_url,
               ESCALATION_NAMESPACE=namespace, ESCALATION_LOG_FORMAT="json",
               ESCALATION_LOG_LEVEL="WARNING", ESCALATION_API_TOKEN_CACHE_S="0",
               # every test module shares one loopback address: no failed-auth throttle here
               # (tests/api/test_api_hardening.py runs servers of its own with one)
               ESCALATION_API_AUTH_FAIL_LIMIT="1000000",
               # concurrency tests send more than the default in flight: no load shedding
               # here (tests/api/test_api_edge.py runs a server that sheds)
               ESCALATION_API_MAX_IN_FLIGHT="1000")
    tokens, names = make_tokens(engine, f"api{uuid.uuid4().hex[:8]}")
    url, proc = start_server(env)
    try:
        yield Server(url, namespace, env, tokens, names, proc)
    finally:
        stop_server(proc)
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        for key in client.scan_iter(match=f"*{{{namespace}:*", count=1000):
            client.delete(key)
        client.close()


@pytest.fixture(scope="module")
def service(api_server: Server) -> Iterator[httpx.Client]:
    with api_server.client("service") as c:
        yield c


@pytest.fixture(scope="module")
def compliance(api_server: Server) -> Iterator[httpx.Client]:
    with api_server.client("compliance") as c:
        yield c


@pytest.fixture(scope="module")
def admin(api_server: Server) -> Iterator[httpx.Client]:
    with api_server.client("admin") as c:
        yield c


def body(**over: Any) -> dict[str, Any]:
    """A valid create body for a fresh dispute (due in a day, so nothing fires)."""
    did = over.pop("dispute_id", str(uuid.uuid4()))
    b: dict[str, Any] = {"dispute_id": did, "source_hash": uuid.uuid4().hex,
                         "materiality": "125.50", "due_at": "2030-01-01T00:00:00+00:00"}
    b.update(over)
    return {k: v for k, v in b.items() if v is not None}
