"""What the tests against the local PostgreSQL cluster share: a database of their own on
the cluster's primary and the CLI environment pointing at it (directly, through pgbouncer or
through a multi-host URL)."""

from __future__ import annotations

import os
import uuid

from tests.conftest import signing_key_pem
from tests.helpers import run_cli
from tests.pg_cluster import PgCluster


def new_database(pg: PgCluster, prefix: str) -> str:
    """Create an empty database on ``pg``'s primary; its name."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    pg.create_database(name)
    return name


def cli_env(redis_url: str, database_url: str, namespace: str | None = None) -> dict[str, str]:
    """The ``escalation`` CLI's environment on these servers (no other ESCALATION_* leaks in)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESCALATION_")}
    env.update(ESCALATION_REDIS_URL=redis_url, ESCALATION_DATABASE_URL=database_url,
               ESCALATION_NAMESPACE=namespace or f"t{uuid.uuid4().hex[:12]}",
               ESCALATION_LOG_FORMAT="json", ESCALATION_CHECKPOINT_KEY=signing_key_pem(),
               ESCALATION_OPERATOR="pg-cluster-test")
    return env


def upgrade(env: dict[str, str]) -> None:
    """``escalation db upgrade`` with ``env``; fails the test with its output otherwise."""
    done = run_cli(env, "db", "upgrade")
    assert done.returncode == 0, done.stdout + done.stderr
