"""One database serves one deployment (namespace): `db upgrade` binds it, a second namespace is
refused -- by `db upgrade`, by workers, by reconcile, by every command -- so reconcile in B can
never copy A's pending escalations into B's Redis."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.conftest import scratch_database
from tests.e2e.test_cli_bad_input import GOOD_HASH
from tests.helpers import run_cli


@pytest.fixture()
def fresh_db(server_urls: tuple[str, str]) -> Iterator[str]:
    with scratch_database(server_urls[1], "escalation_nsbind") as url:
        yield url


def _env(cli_env: dict[str, str], url: str, ns: str) -> dict[str, str]:
    return dict(cli_env, ESCALATION_DATABASE_URL=url, ESCALATION_NAMESPACE=ns)


def test_a_second_namespace_is_refused_on_a_bound_database(
    cli_env: dict[str, str], fresh_db: str, redis_url: str
) -> None:
    a, b = f"nsa-{uuid.uuid4().hex[:6]}", f"nsb-{uuid.uuid4().hex[:6]}"
    res = run_cli(_env(cli_env, fresh_db, a), "db", "upgrade")
    assert res.returncode == 0 and f"bound to namespace {a}" in res.stdout, res.stderr
    did = str(uuid.uuid4())
    res = run_cli(_env(cli_env, fresh_db, a), "enqueue", "--dispute-id", did, "--source-hash",
                  GOOD_HASH, "--due-at", "2030-01-01T00:00:00+00:00")
    assert res.returncode == 0, res.stderr
    # A's own upgrade is idempotent
    assert run_cli(_env(cli_env, fresh_db, a), "db", "upgrade").returncode == 0
    for args in (["db", "upgrade"], ["reconcile"], ["worker", "--burst"], ["status"],
                 ["enqueue", "--dispute-id", str(uuid.uuid4()), "--source-hash", GOOD_HASH,
                  "--due-at", "2030-01-01T00:00:00+00:00"]):
        res = run_cli(_env(cli_env, fresh_db, b), *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert f"belongs to namespace '{a}', not '{b}'" in res.stderr, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    # nothing of A leaked into B's Redis keys
    client = redis.Redis.from_url(redis_url)
    assert not list(client.scan_iter(match=f"*{{{b}:*", count=1000))
    for key in client.scan_iter(match=f"*{{{a}:*", count=1000):
        client.delete(key)


def test_an_unbound_database_is_bound_by_its_first_db_upgrade(
    cli_env: dict[str, str], fresh_db: str, app: Any
) -> None:
    ns = f"nsc-{uuid.uuid4().hex[:6]}"
    # before any `db upgrade` the database is unbound: commands run (upgrades from older
    # versions keep working until the operator runs `db upgrade`)
    assert run_cli(_env(cli_env, fresh_db, ns), "status").returncode == 0
    assert run_cli(_env(cli_env, fresh_db, ns), "db", "upgrade").returncode == 0
    other = run_cli(_env(cli_env, fresh_db, ns + "x"), "status")
    assert other.returncode == 2 and "belongs to namespace" in other.stderr
