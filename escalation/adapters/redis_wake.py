"""The idle wake-up wait on a Redis Cluster: one BLPOP per shard, all in flight at once.

On one server (or a Sentinel primary) a sleeping worker waits with ONE ``BLPOP`` naming every
shard's wake key (``RedisScheduler._blpop``). A Redis Cluster refuses that with ``CROSSSLOT``
as soon as there are two shards: each shard's keys share the hash tag ``{<namespace>:<shard>}``
and so one slot, and different shards hash to different slots (even on the same node, Redis
refuses a multi-key command over two slots).

Here every shard gets its own single-key ``BLPOP <wake key> <timeout>``, sent on a connection
to the node that owns the key's slot, and the replies are awaited together with ``select``:

* the first marker ends the wait at once (the same wake-up latency as one server); the other
  connections, still blocked, are closed (Redis unblocks a client whose connection closes;
  a marker popped by such a BLPOP in the same instant is lost, which costs nothing: a wake
  makes the worker look at every shard's ready set again);
* on timeout every BLPOP returns nil together.

Idle cost: one BLPOP per shard per wait instead of one per wait (each is one command that
blocks in Redis, no polling), and one connection per shard while waiting.
"""

from __future__ import annotations

import contextlib
import select
import time
from typing import Any

import redis
import structlog

log = structlog.get_logger(__name__)


def _sock_of(conn: Any) -> Any:
    return conn._sock  # redis-py keeps the socket here; select needs its file descriptor


def cluster_blpop_any(client: Any, wake_keys: list[str], block_s: float,
                      grace_s: float) -> bool:
    """BLPOP each key of ``wake_keys`` (one command per key, each on its slot's node) with
    timeout ``block_s`` seconds (sent in whole milliseconds, at least 1 ms); wait for the
    replies for at most ``block_s + grace_s`` seconds (host monotonic clock).

    Args:
        client: a ``redis.cluster.RedisCluster``.

    Returns:
        True if any BLPOP took a marker; False on timeout, or when a node could not be reached
        or answered with an error (a failover in progress: the cached slot map is refreshed
        and the caller's next command reports the outage; the wait is not retried here).
    """
    timeout_arg = f"{max(block_s, 0.001):.3f}"
    in_flight: list[tuple[Any, Any]] = []  # (pool, connection)
    waiting: list[Any] = []  # connections whose BLPOP has not answered yet
    woken = False
    failed = False
    try:
        for key in wake_keys:
            node = client.get_node_from_key(key)
            pool = node.redis_connection.connection_pool
            conn = pool.get_connection()
            in_flight.append((pool, conn))
            waiting.append(conn)
            conn.send_command("BLPOP", key, timeout_arg)
        end = time.monotonic() + block_s + grace_s
        while waiting and not woken:
            ready = [c for c in waiting if c.can_read(timeout=0)]
            if not ready:
                rest = end - time.monotonic()
                if rest <= 0:
                    failed = True  # no reply in time: treat those connections as broken
                    break
                readable, _, _ = select.select([_sock_of(c) for c in waiting], [], [], rest)
                ready = [c for c in waiting if _sock_of(c) in readable]
            for conn in ready:
                waiting.remove(conn)
                if conn.read_response() is not None:
                    woken = True
    except (redis.RedisError, OSError) as exc:
        failed = True
        log.warning("scheduler.wake_wait_failed", error=str(exc)[:200])
    finally:
        for pool, conn in in_flight:
            if failed or conn in waiting:
                # still blocked in BLPOP (or broken): closing it is the only clean way back
                conn.disconnect()
            pool.release(conn)
    if failed and not woken:
        with contextlib.suppress(redis.RedisError):
            client.nodes_manager.initialize()  # the slot map may be stale after a failover
    return woken
