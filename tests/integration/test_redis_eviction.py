"""A Redis that may evict keys is refused by workers, enqueue and import (unless explicitly
overridden, loudly); Redis out of memory is a one-line error with PostgreSQL consistent;
doctor says "unknown" when the policy cannot be read."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import redis

from escalation.adapters.redis_policy import eviction_policy
from escalation.bootstrap import build, run_doctor
from escalation.domain.escalation import Status, parse_dispute_id
from escalation.settings import get_settings
from tests.e2e.test_cli_bad_input import GOOD_HASH
from tests.helpers import run_cli
from tests.integration.private_redis import private_redis

LRU = ("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")


def _enqueue_args(did: str) -> list[str]:
    return ["enqueue", "--dispute-id", did, "--source-hash", GOOD_HASH,
            "--due-at", "2030-01-01T00:00:00+00:00"]


def test_worker_enqueue_and_import_refuse_an_evicting_redis(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    csv_file = tmp_path / "d.csv"
    csv_file.write_text(f"id,opened\n{uuid.uuid4()},2024-01-02\n")
    with private_redis(tmp_path, *LRU) as url:
        env = dict(cli_env, ESCALATION_REDIS_URL=url)
        did = str(uuid.uuid4())
        for args in (["worker", "--burst"], _enqueue_args(did),
                     ["import", str(csv_file), "--id-column", "id", "--opened-column", "opened"]):
            res = run_cli(env, *args)
            assert res.returncode == 2, (args, res.stderr)
            assert "maxmemory-policy is allkeys-lru" in res.stderr, res.stderr
            assert len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert app.store.get(parse_dispute_id(did)) is None
        assert redis.Redis.from_url(url).dbsize() == 0


def test_the_override_runs_but_logs_an_error_on_start(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    with private_redis(tmp_path, *LRU) as url:
        env = dict(cli_env, ESCALATION_REDIS_URL=url, ESCALATION_ALLOW_EVICTING_REDIS="true")
        res = run_cli(env, "worker", "--burst")
        assert res.returncode == 0, res.stderr
        events = [json.loads(x) for x in res.stderr.splitlines() if x.startswith("{")]
        loud = [e for e in events if e.get("event") == "redis.eviction_policy_overridden"]
        assert loud and loud[0]["level"] == "error"
        assert loud[0]["maxmemory_policy"] == "allkeys-lru"


def test_out_of_memory_is_one_line_and_postgresql_stays_consistent(
    cli_env: dict[str, str], server_urls: tuple[str, str], tmp_path: Path
) -> None:
    # A database of its own: reconcile below restores every pending escalation of the
    # database into this 2 MB Redis, and the session's shared one holds every earlier test's
    # (with their pre-breach warnings): it ran out of memory again, depending on test order.
    import sqlalchemy as sa

    from escalation.adapters.db import make_engine
    from tests.conftest import scratch_database

    with scratch_database(server_urls[1], "escalation_oom") as db_url, \
            private_redis(tmp_path, "--maxmemory", "2mb", "--maxmemory-policy",
                          "noeviction") as url:
        client = redis.Redis.from_url(url)
        env = dict(cli_env, ESCALATION_REDIS_URL=url, ESCALATION_DATABASE_URL=db_url)
        filler = "x" * 10_000
        try:
            for i in range(10_000):
                client.set(f"filler:{i}", filler)
        except redis.exceptions.OutOfMemoryError:
            pass
        did = str(uuid.uuid4())
        res = run_cli(env, *_enqueue_args(did))
        assert res.returncode == 1, res.stderr
        assert "Redis is out of memory" in res.stderr and "Traceback" not in res.stderr
        # one line besides the JSON log (a fresh database logs its ladders' baseline release)
        plain = [ln for ln in res.stderr.strip().splitlines() if not ln.startswith("{")]
        assert len(plain) == 1, res.stderr
        # PostgreSQL (the record) holds the escalation as pending; Redis has nothing of it
        engine = make_engine(db_url, pool_size=1)
        try:
            with engine.connect() as conn:
                status = conn.execute(sa.text(
                    "SELECT status FROM escalation_state WHERE dispute_id = :d"),
                    {"d": did}).scalar_one_or_none()
        finally:
            engine.dispose()
        assert status == Status.PENDING.value
        assert not any(did in k.decode() for k in client.scan_iter(count=1000))
        # once Redis has memory again, reconcile schedules it from PostgreSQL
        for key in client.scan_iter("filler:*", count=1000):
            client.delete(key)
        res = run_cli(env, "reconcile")
        assert res.returncode == 0, res.stderr
        assert any(did in k.decode() for k in client.scan_iter(count=1000))


def test_doctor_says_unknown_when_info_and_config_are_refused(
    app: Any, tmp_path: Path, database_url: str
) -> None:
    with private_redis(tmp_path, "--rename-command", "CONFIG", "",
                       "--rename-command", "INFO", "") as url:
        client = redis.Redis.from_url(url, decode_responses=True)
        assert eviction_policy(client) is None
        other = build(get_settings(redis_url=url, database_url=database_url,
                                   namespace=app.settings.namespace), actor="doctor")
        try:
            checks = {c.name: c for c in run_doctor(other)}
        finally:
            other.close()
        check = checks["MAXMEMORY_POLICY"]
        assert check.status == "unknown" and check.as_dict()["status"] == "unknown"


def test_the_policy_is_read_from_info_when_config_is_refused(tmp_path: Path) -> None:
    with private_redis(tmp_path, *LRU, "--rename-command", "CONFIG", "") as url:
        assert eviction_policy(redis.Redis.from_url(url, decode_responses=True)) == "allkeys-lru"
