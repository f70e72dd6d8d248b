"""The Redis Cluster wake-up wait (escalation/adapters/redis_wake.py) cut short by a node's
reply: a MOVED after slots moved is one readable INFO line with a reason code, the slot and the
new node (no WARNING, not the bare server text), the slot map is refreshed and the wait ends;
a node that cannot be reached stays a WARNING."""

from __future__ import annotations

from typing import Any

import redis
from structlog.testing import capture_logs

from escalation.adapters.redis_wake import (
    WakeWaitInterruption,
    cluster_blpop_any,
    log_interruption,
)


class _Conn:
    """A connection whose BLPOP reply is ``reply`` (an exception is raised on read)."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.sent: list[tuple[Any, ...]] = []
        self.disconnected = False

    def send_command(self, *args: Any) -> None:
        self.sent.append(args)

    def can_read(self, timeout: float = 0) -> bool:
        return True

    def read_response(self) -> Any:
        if isinstance(self.reply, BaseException):
            raise self.reply
        return self.reply

    def disconnect(self) -> None:
        self.disconnected = True


class _Pool:
    def __init__(self, conn: _Conn) -> None:
        self.conn = conn
        self.released: list[_Conn] = []

    def get_connection(self, *args: Any) -> _Conn:
        return self.conn

    def release(self, conn: _Conn) -> None:
        self.released.append(conn)


class _Nodes:
    def __init__(self) -> None:
        self.refreshed = 0

    def initialize(self) -> None:
        self.refreshed += 1


class _Cluster:
    """Just what cluster_blpop_any uses of a ``redis.cluster.RedisCluster``."""

    def __init__(self, reply: Any) -> None:
        self.pool = _Pool(_Conn(reply))
        self.nodes_manager = _Nodes()

    def get_node_from_key(self, key: str) -> Any:
        node = type("Node", (), {})()
        node.redis_connection = type("R", (), {"connection_pool": self.pool})()
        return node


def test_a_moved_reply_is_one_info_line_with_the_slot_and_the_new_node() -> None:
    client = _Cluster(redis.exceptions.MovedError("1234 127.0.0.1:7001"))
    with capture_logs() as logs:
        woken = cluster_blpop_any(client, ["escalations:{ns:0}:wake"], 1.0, 0.5)
    assert woken is False
    assert client.nodes_manager.refreshed == 1  # the slot map is refreshed at once
    assert client.pool.conn.disconnected and client.pool.released == [client.pool.conn]
    assert logs == [{
        "event": "scheduler.wake_wait_interrupted", "log_level": "info",
        "reason": "slot_moved", "slot": 1234, "node": "127.0.0.1:7001",
        "message": "slot 1234 is served by 127.0.0.1:7001 now: slot map refreshed, the "
                   "next wait goes there"}]
    assert not any("MOVED" in str(v) for v in logs[0].values())


def test_an_ask_reply_is_a_migrating_slot_not_an_alarm() -> None:
    with capture_logs() as logs:
        reason = log_interruption(redis.exceptions.AskError("77 10.0.0.5:7002"))
    assert reason is WakeWaitInterruption.SLOT_MIGRATING
    assert [(r["log_level"], r["reason"], r["slot"], r["node"]) for r in logs] == [
        ("info", "slot_migrating", 77, "10.0.0.5:7002")]


def test_an_unreachable_node_is_still_a_warning_with_its_error() -> None:
    client = _Cluster(redis.exceptions.ConnectionError("Connection reset by peer"))
    with capture_logs() as logs:
        assert cluster_blpop_any(client, ["escalations:{ns:0}:wake"], 1.0, 0.5) is False
    assert [(r["log_level"], r["reason"], r["error"]) for r in logs] == [
        ("warning", "node_unreachable", "Connection reset by peer")]
    assert client.nodes_manager.refreshed == 1


def test_another_error_reply_is_a_node_error_warning() -> None:
    with capture_logs() as logs:
        reason = log_interruption(redis.exceptions.ResponseError("ERR unknown command"))
    assert reason is WakeWaitInterruption.NODE_ERROR
    assert [(r["log_level"], r["reason"]) for r in logs] == [("warning", "node_error")]


def test_a_marker_still_wakes_the_worker_without_any_line() -> None:
    client = _Cluster(["escalations:{ns:0}:wake", "1"])
    with capture_logs() as logs:
        assert cluster_blpop_any(client, ["escalations:{ns:0}:wake"], 1.0, 0.5) is True
    assert logs == [] and client.nodes_manager.refreshed == 0
