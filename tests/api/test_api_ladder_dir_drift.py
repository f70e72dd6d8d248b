"""A running ``serve`` whose ladder directory and the ladder releases disagree (a version
released from a shell with another ``ESCALATION_LADDERS_DIR``): it keeps serving every
escalation pinned to a version it can read, refuses creates on the affected ladder with a
problem naming it, says so in ``/readyz`` details and in one log line per state change, and
recovers without a restart once the file is copied in (docs/operations.md, "Ladder
directory out of step with the releases")."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from escalation.resources import shipped_ladders_dir
from tests.api.conftest import body, make_tokens, start_server, stop_server
from tests.helpers import run_cli

#: the server's re-read interval of the ladder directory and releases in these tests
REFRESH_S = 0.5

LADDER_V1 = """ladder = "{name}"
version = {version}
terminal_tier = "compliance"
description = "drift test ladder v{version}"
{previous}
[[tiers]]
id = "standard"
name = "Standard review"
rank = 10
window = {{ amount = {hours}, unit = "calendar_hours", calendar = "utc" }}

[[tiers]]
id = "compliance"
name = "Compliance review"
rank = 30
window = {{ amount = 72, unit = "calendar_hours", calendar = "utc" }}
"""


def ladder_text(name: str, version: int) -> str:
    previous = f"previous_version = {version - 1}\n" if version > 1 else ""
    return LADDER_V1.format(name=name, version=version, hours=24 * version, previous=previous)


def server_log(proc: Any) -> list[dict[str, Any]]:
    """The JSON log lines the server wrote so far."""
    log = proc.log_file
    log.seek(0)
    out = []
    for line in log.read().decode(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def wait_for(check: Any, timeout_s: float = 15.0) -> Any:
    """Poll ``check()`` until it returns something truthy; return it (fail on timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {check}")
        time.sleep(0.1)


class Drift:
    """The server, its ladder directory, the other directory and the test ladder's name."""

    def __init__(self, url: str, proc: Any, env: dict[str, str], tokens: dict[str, str],
                 served: Path, other: Path, name: str) -> None:
        self.url, self.proc, self.env, self.tokens = url, proc, env, tokens
        self.served, self.other, self.name = served, other, name

    def client(self, role: str | None = "admin") -> httpx.Client:
        headers = {} if role is None else {"Authorization": f"Bearer {self.tokens[role]}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@pytest.fixture()
def drift(redis_url: str, database_url: str, engine: sa.Engine,
          tmp_path: Path) -> Iterator[Drift]:
    import os

    import redis

    name = f"drift_{uuid.uuid4().hex[:8]}"
    served, other = tmp_path / "served", tmp_path / "other"
    served.mkdir()
    other.mkdir()
    shutil.copy(shipped_ladders_dir() / "dispute_review.v1.toml", served)
    for d in (served, other):
        (d / f"{name}.v1.toml").write_text(ladder_text(name, 1))
    (other / f"{name}.v2.toml").write_text(ladder_text(name, 2))
    namespace = f"t{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=database_url,
               ESCALATION_NAMESPACE=namespace, ESCALATION_LOG_FORMAT="json",
               ESCALATION_LOG_LEVEL="INFO", ESCALATION_API_TOKEN_CACHE_S="0",
               ESCALATION_API_AUTH_FAIL_LIMIT="1000000",
               ESCALATION_LADDERS_DIR=str(served),
               ESCALATION_LADDER_REFRESH_S=str(REFRESH_S))
    tokens, _ = make_tokens(engine, f"drift{uuid.uuid4().hex[:8]}")
    url, proc = start_server(env)
    try:
        yield Drift(url, proc, env, tokens, served, other, name)
    finally:
        stop_server(proc)
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        for key in client.scan_iter(match=f"*{{{namespace}:*", count=1000):
            client.delete(key)
        client.close()


def test_release_from_another_directory_degrades_one_ladder_and_recovers(
        drift: Drift) -> None:
    name = drift.name
    with drift.client("service") as service, drift.client("admin") as admin, \
            drift.client(None) as anon:
        pinned = service.post("/v1/escalations", json=body(ladder=name))
        assert pinned.status_code == 201, pinned.text
        assert pinned.json()["ladder_version"] == 1
        pinned_id = pinned.json()["dispute_id"]
        assert admin.get("/readyz").json()["checks"]["ladders"] == "ok"

        # v2 released from a shell whose ladder directory is not the server's
        rel = run_cli({**drift.env, "ESCALATION_LADDERS_DIR": str(drift.other)},
                      "ladder", "release", "--ladder", name, "--version", "2",
                      "--reason", "CHG-drift")
        assert rel.returncode == 0, rel.stderr
        time.sleep(REFRESH_S * 3)

        # every other ladder is served as before
        other = service.post("/v1/escalations", json=body(ladder="dispute_review"))
        assert other.status_code == 201, other.text
        # escalations pinned to a readable version are still served
        assert service.get(f"/v1/escalations/{pinned_id}").status_code == 200
        # a create on the affected ladder: a problem naming ladder, version and the fix
        refused = service.post("/v1/escalations", json=body(ladder=name))
        assert refused.status_code == 503, refused.text
        assert refused.headers["content-type"].startswith("application/problem+json")
        problem = refused.json()
        assert problem["ladder"] == name and problem["version"] == 2
        assert problem["reason"] == "missing"
        assert str(drift.served) not in problem["detail"]  # no path on the server
        assert f"{name}.v2.toml" in problem["detail"]
        assert "ESCALATION_LADDERS_DIR" in problem["detail"]
        assert "Retry-After" in refused.headers

        # the anonymous probe says up; the details (with a token) name the problem
        anon_ready = anon.get("/readyz")
        assert anon_ready.status_code == 200 and anon_ready.json() == {"status": "ready"}
        ready = admin.get("/readyz")
        assert ready.status_code == 200
        ladders = ready.json()["checks"]["ladders"]
        assert ladders["state"] == "degraded"
        (entry,) = ladders["unreadable"]
        assert entry["ladder"] == name and entry["version"] == 2
        assert entry["reason"] == "missing"
        assert len(entry["expected_checksum"]) == 64 and entry["found_checksum"] is None

        # more requests do not log more: one WARNING for the change of state
        for _ in range(5):
            service.post("/v1/escalations", json=body(ladder=name))
        time.sleep(REFRESH_S * 3)
        degraded = [e for e in server_log(drift.proc)
                    if e.get("event") == "ladders.directory_degraded"]
        assert len(degraded) == 1, degraded
        line = degraded[0]
        assert line["level"] == "warning"
        assert line["ladder"] == name and line["version"] == 2
        assert line["expected_checksum"] == entry["expected_checksum"]
        assert line["found_checksum"] is None

        # the file is copied in: served again without a restart
        shutil.copy(drift.other / f"{name}.v2.toml", drift.served)

        def recovered() -> bool:
            return bool(service.post("/v1/escalations",
                                     json=body(ladder=name)).status_code == 201)

        wait_for(recovered)
        assert admin.get("/readyz").json()["checks"]["ladders"] == "ok"
        restored = [e for e in server_log(drift.proc)
                    if e.get("event") == "ladders.directory_restored"]
        assert len(restored) == 1, restored
        assert drift.proc.poll() is None  # the same process all along
