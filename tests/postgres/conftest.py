"""Fixtures for the tests against a real PostgreSQL primary, hot standby and pgbouncer
(``tests/pg_cluster.py``), marked ``pg_cluster``.

They start servers of their own on free loopback ports, so they run only when selected with
``-m pg_cluster`` (``.ci/run`` runs them once, as a step of their own), not in a plain
``pytest -q``. Selected on a machine without the PostgreSQL server binaries or pgbouncer they
are skipped with the reason, except under ``CI=true``, where a missing binary fails them.

* ``pg_cluster`` (session): an asynchronous hot standby and a transaction-pooling pgbouncer
  in front of the primary, shared by the tests that leave the topology as they found it.
* ``pg_cluster_factory`` (function): ``pg_cluster_factory(synchronous=..., ...)`` starts a
  fresh :class:`tests.pg_cluster.PgCluster` (about 2 s), stopped after the test: for tests
  that promote, kill or lag the replica.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.pg_cluster import PgCluster, missing_reason


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """``pg_cluster`` tests run only when selected with ``-m pg_cluster``; selected where the
    servers cannot start, they are skipped with the reason (outside CI)."""
    wanted = "pg_cluster" in str(config.getoption("markexpr") or "")
    reason = missing_reason()
    for item in items:
        if "pg_cluster" not in item.keywords:
            continue
        if not wanted:
            item.add_marker(pytest.mark.skip(
                reason="starts its own PostgreSQL primary, standby and pgbouncer: select it "
                       "with -m pg_cluster (.ci/run runs it once)"))
        elif reason is not None and not _in_ci():
            item.add_marker(pytest.mark.skip(reason=reason))


def _require_servers() -> None:
    reason = missing_reason()
    if reason is not None:
        if _in_ci():
            pytest.fail(f"CI=true and the PostgreSQL cluster cannot start: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """A running primary + asynchronous hot standby + pgbouncer (transaction pooling), for
    the whole session. Tests must leave it as they found it (no promote, no kill)."""
    _require_servers()
    with PgCluster(synchronous=False) as cluster:
        yield cluster


@pytest.fixture()
def pg_cluster_factory() -> Iterator[Callable[..., PgCluster]]:
    """Start fresh clusters: ``pg_cluster_factory(**PgCluster kwargs)``; all are stopped
    (and their directories removed) after the test."""
    _require_servers()
    made: list[PgCluster] = []

    def make(**kwargs: Any) -> PgCluster:
        cluster = PgCluster(**kwargs)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()
