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


# --------------------------------------------------------------------------- packer
_ARGS: list[tuple[object, ...]] = [
    ("EVALSHA", "a" * 40, 2, "k:{s0}:1", "k:{s0}:2", "ünï", "", "0", 12, -7, 2**63 - 1),
    ("SET", b"\x00\xff raw", bytearray(b"ba"), memoryview(b"mv")),
    ("HSET", "h", "f", 2.5, "g", 1e20, "e", 0.1),
    ("CLIENT SETNAME", "w-1"),
    (b"CONFIG GET", b"maxmemory"),
    ("XADD", "s", "*", "a" * 100_000, "b"),
]


@pytest.mark.parametrize("args", _ARGS, ids=lambda a: str(a[0]))
def test_direct_packer_sends_the_bytes_redis_py_sends(args: tuple[object, ...]) -> None:
    from redis.connection import HiredisRespSerializer

    from escalation.adapters.redis_client import DirectPacker

    assert b"".join(DirectPacker().pack(*args)) == b"".join(
        HiredisRespSerializer().pack(*args))


@pytest.mark.parametrize("bad", [None, True, object(), [1]],
                         ids=["None", "bool", "object", "list"])
def test_direct_packer_refuses_what_redis_py_refuses(bad: object) -> None:
    import redis

    from escalation.adapters.redis_client import DirectPacker

    with pytest.raises(redis.DataError):
        DirectPacker().pack("SET", "k", bad)


def test_one_server_and_sentinel_clients_get_the_direct_packer() -> None:
    from escalation.adapters.redis_client import DirectPacker, make_redis

    client = make_redis("redis://127.0.0.1:1/3")  # no connection is made here
    conn = client.connection_pool.make_connection()
    assert isinstance(conn._command_packer, DirectPacker)
    client.close()
