"""The harness itself: a standby that streams and lags on demand, a promotion, pgbouncer."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest

from tests.pg_cluster import PgCluster

pytestmark = pytest.mark.pg_cluster


def test_standby_is_read_only_and_replays_what_the_primary_commits(pg_cluster: PgCluster) -> None:
    pg_cluster.create_database("harness_rw")
    pg_cluster.sql("primary", "CREATE TABLE t (x int)", "harness_rw")
    pg_cluster.sql("pgbouncer", "INSERT INTO t VALUES (1)", "harness_rw")
    pg_cluster.wait_replica_caught_up()
    assert pg_cluster.sql("replica", "SELECT count(*) FROM t", "harness_rw") == [(1,)]
    assert pg_cluster.is_in_recovery("replica")
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        pg_cluster.sql("replica", "INSERT INTO t VALUES (2)", "harness_rw")


def test_paused_replay_loses_unapplied_commits_only_if_never_received(
        pg_cluster_factory: Callable[..., PgCluster]) -> None:
    pg = pg_cluster_factory(synchronous=False, pgbouncer=False)
    pg.create_database("lag")
    pg.sql("primary", "CREATE TABLE t (x int)", "lag")
    pg.wait_replica_caught_up()
    pg.pause_replay()
    pg.sql("primary", "INSERT INTO t VALUES (1)", "lag")
    time.sleep(0.5)
    assert pg.sql("replica", "SELECT count(*) FROM t", "lag") == [(0,)]
    assert pg.replay_lag_bytes() > 0
    pg.kill("primary")
    pg.promote()
    assert not pg.is_in_recovery("replica")
    # received WAL is applied before the promotion completes
    assert pg.sql("replica", "SELECT count(*) FROM t", "lag") == [(1,)]
    pg.sql("replica", "INSERT INTO t VALUES (2)", "lag")


def test_synchronous_standby_is_named_by_the_primary(
        pg_cluster_factory: Callable[..., PgCluster]) -> None:
    pg = pg_cluster_factory(synchronous=True, pgbouncer=False)
    rows = pg.sql("primary", "SELECT sync_state FROM pg_stat_replication")
    assert rows == [("sync",)]
