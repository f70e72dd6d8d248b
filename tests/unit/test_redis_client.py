"""Redis URL schemes: one server, a Cluster, a Sentinel set (adapters/redis_client.py)."""

from __future__ import annotations

import pytest

from escalation.adapters.redis_client import parse_topology
from escalation.domain.errors import ConfigError
from escalation.settings import get_settings


def test_server_urls_stay_one_server() -> None:
    assert parse_topology("redis://127.0.0.1:6379/1").kind == "server"
    assert parse_topology("rediss://h:6380/0").tls


def test_cluster_url_lists_seed_nodes() -> None:
    topo = parse_topology("redis+cluster://:s3cret@10.0.0.1:7000,10.0.0.2:7001/")
    assert topo.kind == "cluster"
    assert topo.hosts == (("10.0.0.1", 7000), ("10.0.0.2", 7001))
    assert topo.password == "s3cret" and topo.db == 0 and not topo.tls


def test_sentinel_url_names_service_and_db() -> None:
    topo = parse_topology("rediss+sentinel://a:26379,b:26380/escalation/9")
    assert (topo.kind, topo.service, topo.db, topo.tls) == ("sentinel", "escalation", 9, True)
    assert topo.hosts == (("a", 26379), ("b", 26380))
    assert parse_topology("redis+sentinel://a:26379/escalation").db == 0


@pytest.mark.parametrize("url", [
    "redis+cluster://",
    "redis+cluster://h:7000/3",            # a cluster has only DB 0
    "redis+cluster://h:port/",
    "redis+sentinel://h:26379/",           # no service
    "redis+sentinel://h:26379/svc/x",      # DB not an integer
    "memcached://h:11211",
])
def test_malformed_urls_are_refused_with_one_line(url: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_topology(url)
    assert "\n" not in str(err.value)


def test_settings_refuse_a_bad_cluster_url_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"(?i)redis.url"):
        get_settings(redis_url="redis+sentinel://h:26379/")
    assert get_settings(redis_url="redis+cluster://h:7000/").redis_url == "redis+cluster://h:7000/"


def test_password_is_not_echoed_in_errors() -> None:
    with pytest.raises(ConfigError) as err:
        parse_topology("redis+cluster://:hunter2@h:x/")
    assert "hunter2" not in str(err.value)
