"""A private redis-server on a free port, for tests that need server settings the shared test
Redis must not be given (eviction policy, maxmemory, disabled commands)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def private_redis(tmp: Path, *args: str) -> Iterator[str]:
    """Start ``redis-server`` with ``args``; yield its URL; stop it (this process only)."""
    exe = shutil.which("redis-server") or shutil.which("valkey-server")
    if exe is None:
        pytest.skip("no redis-server/valkey-server binary on PATH")
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp), *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                redis.Redis.from_url(url, socket_timeout=1).execute_command("PING")
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
