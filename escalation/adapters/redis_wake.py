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

A wait cut short logs one ``scheduler.wake_wait_interrupted`` line with a ``reason`` code
(:class:`WakeWaitInterruption`): after a reshard or a failover moved a shard's slot, the node
answers ``MOVED <slot> <host:port>`` (or ``ASK`` while the slot migrates); that is routine (the
slot map is refreshed and the next wait goes to the new owner), so it is an INFO line naming
the slot and its new node, not a WARNING with the bare server reply. A node that cannot be
reached or answers another error is a WARNING.
"""

from __future__ import annotations

import contextlib
import select
import time
from enum import StrEnum
from typing import Any

import redis
import structlog

log = structlog.get_logger(__name__)


class WakeWaitInterruption(StrEnum):
    """Why a cluster wake-up wait ended early: the ``reason`` of
    ``scheduler.wake_wait_interrupted``."""

    SLOT_MOVED = "slot_moved"  # MOVED: the slot has a new owner (reshard, failover)
    SLOT_MIGRATING = "slot_migrating"  # ASK: the slot is being migrated right now
    NODE_UNREACHABLE = "node_unreachable"  # connection refused, reset or timed out
    NODE_ERROR = "node_error"  # any other error reply


def log_interruption(exc: Exception) -> WakeWaitInterruption:
    """Log one ``scheduler.wake_wait_interrupted`` line for ``exc`` (what ended a wake-up
    wait) and return its reason code. A redirect (``MovedError``/``AskError``: read from the
    exception's ``slot_id``/``host``/``port``, never parsed from its text) is INFO with
    ``slot`` and ``node`` (``host:port``): the slot map is refreshed and nothing is wrong.
    Anything else is a WARNING with the error text (first 200 characters)."""
    if isinstance(exc, redis.exceptions.AskError):  # MovedError is an AskError
        reason = (WakeWaitInterruption.SLOT_MOVED
                  if isinstance(exc, redis.exceptions.MovedError)
                  else WakeWaitInterruption.SLOT_MIGRATING)
        node = f"{exc.host}:{exc.port}"
        log.info("scheduler.wake_wait_interrupted", reason=reason.value, slot=exc.slot_id,
                 node=node, message=f"slot {exc.slot_id} is served by {node} now: slot map "
                                    "refreshed, the next wait goes there")
        return reason
    reason = (WakeWaitInterruption.NODE_UNREACHABLE
              if isinstance(exc, (redis.exceptions.ConnectionError,
                                  redis.exceptions.TimeoutError, OSError))
              else WakeWaitInterruption.NODE_ERROR)
    log.warning("scheduler.wake_wait_interrupted", reason=reason.value, error=str(exc)[:200],
                message="a cluster node did not answer the wake-up wait: slot map refreshed; "
                        "the worker's next command reports an outage if it lasts")
    return reason


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
        log_interruption(exc)
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
