"""Shared fixtures: real Redis/Valkey and real PostgreSQL, never stand-ins.

Servers: ``ESCALATION_TEST_REDIS_URL`` / ``ESCALATION_TEST_DATABASE_URL`` when set (CI sets
them to the machine's running services), otherwise the embedded Valkey and PostgreSQL
started under ``ESCALATION_TEST_HOME`` (default ``/tmp/escalation-test-home``).

Isolation: Redis DB index 9 (never 0) and a random key namespace per test, whose keys are
deleted afterwards; a PostgreSQL database created for this test session and dropped at the
end (the ledger refuses DELETE by design, so tests use fresh dispute ids instead of cleanup).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa

TEST_REDIS_DB = 9

# The folder of public sample data (e.g. the CFPB complaints sample) next to the checkout; it
# is not part of the repository. Tests that read it skip with a reason when it is absent.
SHARED_DATA = Path(os.environ.get("ESCALATION_TEST_DATA_DIR",
                                  Path(__file__).resolve().parents[1].parent / "shared" / "data"))


def _embedded_urls() -> tuple[str, str]:
    from escalation.adapters.embedded import ensure_services

    home = Path(os.environ.get("ESCALATION_TEST_HOME", "/tmp/escalation-test-home"))
    urls = ensure_services(home)
    return urls.redis_url, urls.database_url


@pytest.fixture(scope="session")
def server_urls() -> tuple[str, str]:
    """(redis base URL, PostgreSQL admin URL) of the servers under test."""
    r = os.environ.get("ESCALATION_TEST_REDIS_URL")
    d = os.environ.get("ESCALATION_TEST_DATABASE_URL")
    if r and d:
        return r, d
    er, ed = _embedded_urls()
    return r or er, d or ed


def pytest_configure(config: Any) -> None:
    """pytest-xdist workers run with ``COLUMNS=80`` and ``LINES=24`` in their environment,
    which the CLI subprocesses the tests start would inherit (and wrap their lines at 80
    columns: a long tmp path then splits a message a test reads). The tests run the CLI as
    a pipe does, with no terminal size set."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)


TOPOLOGIES = ("server", "cluster", "sentinel")
#: shards the ``settings``/``sched`` fixtures use per topology: more than one on a cluster so
#: that every path that visits shards crosses slots (and nodes)
TOPOLOGY_SHARDS = {"server": 1, "cluster": 4, "sentinel": 1}


def pytest_addoption(parser: Any) -> None:
    """``--redis-topology server|cluster|sentinel``: which Redis the ``redis_url`` fixture
    gives (tests/topologies.py starts the local cluster / sentinel set)."""
    parser.addoption("--redis-topology", choices=TOPOLOGIES, default="server",
                     help="run the Redis tests against one server (default), the local "
                          "Redis Cluster or the local Sentinel set (tests/topologies.py)")


@pytest.fixture(scope="session")
def redis_topology(request: Any) -> str:
    """The ``--redis-topology`` chosen for this run."""
    return str(request.config.getoption("--redis-topology"))


@pytest.fixture(scope="session")
def topology_shards(redis_topology: str) -> int:
    """Shard count the ``settings`` fixture uses (see ``TOPOLOGY_SHARDS``)."""
    return TOPOLOGY_SHARDS[redis_topology]


@pytest.fixture(scope="session")
def redis_url(server_urls: tuple[str, str], redis_topology: str) -> str:
    """Redis URL pointing at the test DB index (9), or at the chosen topology."""
    from redis.connection import parse_url

    if redis_topology != "server":
        from tests import topologies

        return topologies.topology_test_url(redis_topology, TEST_REDIS_DB)

    base = server_urls[0]
    kw = parse_url(base)
    host = kw.get("host", "127.0.0.1")
    port = kw.get("port", 6379)
    auth = f":{kw['password']}@" if kw.get("password") else ""
    return f"redis://{auth}{host}:{port}/{TEST_REDIS_DB}"


_TEMPLATES: dict[str, str] = {}  # admin URL -> this process's template database at head


def _template_at_head(admin: sa.Engine, admin_url: str) -> str:
    """The name of a database at the Alembic head that this pytest process copies for each
    scratch database (``CREATE DATABASE ... TEMPLATE``: about 50 ms instead of running every
    migration, 1-3 s). Created on first use; dropped when the process ends. Nothing connects
    to it after its migration, as PostgreSQL requires of a template."""
    from escalation.adapters.db import upgrade_to_head

    name = _TEMPLATES.get(admin_url)
    if name is not None:
        return name
    name = f"escalation_template_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        upgrade_to_head(sa.engine.make_url(admin_url).set(database=name)
                        .render_as_string(hide_password=False))
    except BaseException:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        raise
    _TEMPLATES[admin_url] = name

    def drop() -> None:
        eng = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        try:
            with eng.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except sa.exc.OperationalError:
            pass  # the server this test run started (embedded) was stopped before exit
        finally:
            eng.dispose()

    atexit.register(drop)
    return name


@contextlib.contextmanager
def scratch_database(admin_url: str, prefix: str, *, migrate: bool = True) -> Iterator[str]:
    """Create ``<prefix>_<random>`` at the Alembic head (a copy of this process's template
    database; empty with ``migrate=False``); yield its URL; drop it afterwards.

    The one place tests create databases (the ledger refuses DELETE, so isolation is by
    database, never by cleanup).
    """
    from escalation.adapters.db import normalize_url

    admin_url = normalize_url(admin_url)
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    template = f' TEMPLATE "{_template_at_head(admin, admin_url)}"' if migrate else ""
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"{template}')
    url = sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(scope="session")
def database_url(server_urls: tuple[str, str]) -> Iterator[str]:
    """URL of a PostgreSQL database created for this session at the Alembic head; dropped after.

    Many tests' namespaces share it (it is never bound to one, unlike a deployment's). A
    worker's leader reconciles every 5 minutes, and reconcile takes every pending escalation
    in the database as its own namespace's: a test worker living past its first maintenance
    poll would pull every earlier test's escalations into its namespace and fire them. The
    reconcile slot is therefore claimed far ahead here; tests of the automatic reconcile use
    a database of their own."""
    with scratch_database(server_urls[1], "escalation_test") as url:
        from escalation.adapters.db import make_engine

        engine = make_engine(url, pool_size=1)
        try:
            with engine.begin() as conn:
                conn.execute(sa.text(
                    "INSERT INTO maintenance_runs (job, last_occurrence, last_run_at, "
                    "last_status, last_leader) VALUES ('reconcile', '9999-01-01T00:00:00Z', "
                    "now(), 'ok', 'test-session')"))
        finally:
            engine.dispose()
        yield url


@pytest.fixture()
def scratch(server_urls: tuple[str, str]) -> Iterator[sa.Engine]:
    """An engine on a database of its own at the Alembic head, dropped after the test (for
    tests that rewrite or drop ledger rows and partitions, which must not leak into others).
    Its URL, for a CLI subprocess: ``scratch.url.render_as_string(hide_password=False)``."""
    from escalation.adapters.db import make_engine

    with scratch_database(server_urls[1], "escalation_scratch") as url:
        eng = make_engine(url)
        try:
            yield eng
        finally:
            eng.dispose()


@pytest.fixture(autouse=True)
def _reap_children() -> Iterator[None]:
    """After each test: the child processes it started with an output file
    (:func:`tests.helpers.own_log`) killed if still running, their files closed."""
    yield
    from tests.helpers import reap_children

    reap_children()


@pytest.fixture()
def namespace() -> str:
    """A fresh Redis key namespace for one test."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture()
def redis_client(redis_url: str, namespace: str) -> Iterator[redis.Redis]:
    """A client on the test DB; deletes every key of this test's namespace afterwards."""
    from escalation.adapters.redis_client import make_redis

    client: redis.Redis = make_redis(redis_url)
    yield client
    for key in client.scan_iter(match=f"*{{{namespace}:*", count=1000):
        client.delete(key)
    client.close()


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[sa.Engine]:
    """SQLAlchemy engine on the session's test database."""
    from escalation.adapters.db import make_engine

    eng = make_engine(database_url)
    yield eng
    eng.dispose()


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Every test runs against real servers. The failover tests (markers ``cluster`` /
    ``sentinel``) start and kill local redis-server processes and run ~1 minute each: they
    run only when selected by name with ``-m`` (``.ci/run`` runs them once), not in a plain
    ``pytest -q``."""
    import shutil

    wanted = str(config.getoption("markexpr") or "")
    for item in items:
        for marker in ("cluster", "sentinel"):
            if marker not in item.keywords:
                continue
            if marker not in wanted:
                item.add_marker(pytest.mark.skip(
                    reason=f"failover test: select it with -m {marker} (tests/topologies.py "
                           "starts the local topology; .ci/run runs it once)"))
            elif shutil.which("redis-server") is None:
                item.add_marker(pytest.mark.skip(reason="redis-server is not installed"))


@pytest.fixture()
def settings(redis_url: str, database_url: str, namespace: str, topology_shards: int) -> Any:
    """Settings pointing at the test servers with this test's namespace."""
    from escalation.settings import get_settings

    return get_settings(redis_url=redis_url, database_url=database_url, namespace=namespace,
                        poll_interval_s=1, lock_ttl_s=5, log_format="json",
                        shards=topology_shards)


@pytest.fixture()
def app(settings: Any, redis_client: redis.Redis) -> Iterator[Any]:
    """The wired App (scheduler, store, ladders, calendars) for this test's namespace."""
    from escalation.bootstrap import build

    a = build(settings, actor="test-worker")
    yield a
    a.close()


@pytest.fixture()
def cli_env(redis_url: str, database_url: str, namespace: str,
            topology_shards: int) -> dict[str, str]:
    """Environment for running the ``escalation`` CLI as a subprocess against the test servers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=database_url,
               ESCALATION_NAMESPACE=namespace, ESCALATION_LOG_FORMAT="json",
               ESCALATION_SHARDS=str(topology_shards),
               ESCALATION_CHECKPOINT_KEY=signing_key_pem())
    return env


@functools.cache
def signing_key_pem() -> str:
    """A throw-away Ed25519 checkpoint signing key (PEM) for CLI tests, one per session."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode()
