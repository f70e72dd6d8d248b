"""Inspection, wake-ups and the single-step operations of the Redis scheduler.

Part of ``RedisScheduler`` (see ``redis_scheduler_base``): reads for ``escalation status``
and reconcile, the worker's blocking wait for a wake marker, and the step-by-step
operations (non-destructive due read, pop-if-due, lock acquire/release) kept for tests and
the CLI.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import cast
from uuid import UUID

import redis

from escalation.adapters.redis_client import is_cluster
from escalation.adapters.redis_keys import Keys, shard_of
from escalation.adapters.redis_scheduler_base import (
    _WAKE_GRACE_S,
    MAX_BATCH,
    MAX_LEASE_MS,
    WAKE_MARGIN_S,
    SchedulerBase,
)
from escalation.adapters.redis_scripts import check_range
from escalation.adapters.redis_wake import cluster_blpop_any
from escalation.domain.errors import InvalidInput

NOTIFIED_SLACK_MS = 300_000
"""How far before a decision :func:`review_notified` starts reading a review stream
(5 minutes, epoch ms): the clock of a promoted replica may be behind the old primary's."""


def review_notified(client: redis.Redis, namespace: str, shards: int,
                    wanted: Mapping[str, tuple[str, int]], count: int = 1000) -> set[str]:
    """Which of the wanted notifications already have an entry in their review stream.

    The one reader behind ``ReliabilityRedis.notified`` (reconcile) and
    ``RedisScheduler.notified`` (the worker's STUCK_MEMBER repair): both repairs of a missing
    payload send the latest decision's entry only when this finds none
    (docs/reliability.md "Failover and notifications").

    Args:
        client: ``redis.Redis`` with ``decode_responses=True``.
        namespace / shards: the scheduler's.
        wanted: dispute id -> (idempotency key ``<dispute>:<seq>``, decided epoch ms).
        count: XRANGE page size.

    Returns:
        the idempotency keys found. Each shard's stream is read (XRANGE, pages of ``count``)
        from its earliest wanted decision minus :data:`NOTIFIED_SLACK_MS`: an entry is XADDed
        after its decision (the apply follows the record; its id is the Redis TIME of that
        apply), so an entry older than that cannot be one of them; the slack covers a
        promoted replica whose clock is behind the old primary's.
    """
    by_shard: dict[int, tuple[set[str], int]] = {}
    for did, (key, decided_ms) in wanted.items():
        shard = shard_of(did, shards)
        keys, since = by_shard.get(shard, (set(), decided_ms))
        keys.add(key)
        by_shard[shard] = (keys, min(since, decided_ms))
    found: set[str] = set()
    for shard, (keys, since) in by_shard.items():
        stream = Keys(namespace, shard).review
        start = str(max(since - NOTIFIED_SLACK_MS, 0))
        while True:
            page = cast(list[tuple[str, dict[str, str] | None]],
                        client.xrange(stream, start, "+", count=count))
            for _entry_id, fields in page:
                got = (fields or {}).get("idempotency_key")
                if got is not None and got in keys:
                    found.add(got)
            if len(page) < count:
                break
            start = "(" + str(page[-1][0])
    return found


class InspectionMixin(SchedulerBase):
    """Reads, wake-ups and the single-step operations (due read, pop-if-due, lock)."""

    # ------------------------------------------------------- single step: due read, pop
    def fetch_due(self, batch_size: int) -> list[tuple[str, int]]:
        """Non-destructive read of up to ``batch_size`` due members (score <= Redis TIME).

        Returns:
            ``(dispute id, score epoch ms)`` pairs, earliest first (across shards).
        """
        check_range("batch_size", batch_size, 1, MAX_BATCH)
        now = self._now_ms()
        found: list[tuple[str, int]] = []
        for keys in self.shard_keys():
            rows = self._client.zrangebyscore(
                keys.pending, "-inf", now, start=0, num=batch_size, withscores=True
            )
            found += [(str(m), int(s)) for m, s in cast(list[tuple[str, float]], rows)]
        return sorted(found, key=lambda pair: pair[1])[:batch_size]

    def pop_if_due(self) -> tuple[str, int] | None:
        """Atomically pop the earliest member if it is due (pop_if_due.lua), else None.

        Shards are tried in order; a future member is never removed. The payload is kept.
        """
        for keys in self.shard_keys():
            raw = self._run("pop_if_due", [keys.pending], [])
            if raw:
                return str(raw[0]), int(float(raw[1]))
        return None

    # ------------------------------------------------------- single step: lock
    def try_acquire_lock(self, dispute_id: UUID | str, ttl_ms: int, owner: str) -> bool:
        """``SET lock owner NX PX ttl_ms``: True if acquired, False if someone holds it."""
        check_range("ttl_ms", ttl_ms, 1, MAX_LEASE_MS)
        if not owner:
            raise InvalidInput("owner must not be empty")
        key = self.keys_for(dispute_id).lock(dispute_id)
        return bool(self._client.set(key, owner, nx=True, px=ttl_ms))

    def release_lock(self, dispute_id: UUID | str, owner: str) -> bool:
        """Compare-and-delete (release_lock.lua): True only if ``owner`` held the lock."""
        if not owner:
            raise InvalidInput("owner must not be empty")
        key = self.keys_for(dispute_id).lock(dispute_id)
        return int(self._run("release_lock", [key], [owner])) == 1

    # ------------------------------------------------------------------ wake-ups
    def wait_for_wake(self, timeout_s: float) -> bool:
        """Block until an enqueue pushed a wake marker, or ``timeout_s`` passed.

        Precision: Redis expires blocking timeouts from its event loop, which runs every
        ``1000 / hz`` ms on an idle server (100 ms at the default ``hz 10``), so a BLPOP
        timeout can end up to ~100 ms late. The BLPOP therefore covers only
        ``timeout_s - WAKE_MARGIN_S`` and the rest is slept locally (``time.sleep``, host
        monotonic clock, relative to now: no clock comparison), so a wait for the next due
        time ends within a millisecond or two of it. A marker pushed during the final local
        sleep (at most ``WAKE_MARGIN_S``) is seen on the next wait. Timeouts are sent in
        whole milliseconds and never as ``0`` (which would mean "block forever").

        Args:
            timeout_s: longest wait in seconds (0 or less = just check, no blocking).

        Returns:
            True if a marker was taken, False on timeout. The socket read is bounded by
            the BLPOP timeout + 1 s so a lost server cannot hang the worker.
        """
        wake_keys = [k.wake for k in self.shard_keys()]
        if timeout_s <= 0:
            woken = any(self._client.lpop(key) is not None for key in wake_keys)
            if woken:
                self._ready_maybe.clear()  # a wake: look at every shard's ready set again
            return woken
        deadline = time.monotonic() + timeout_s
        block_s = timeout_s - WAKE_MARGIN_S
        if block_s >= 0.001 and self._blpop(wake_keys, block_s):
            self._ready_maybe.clear()
            return True
        rest = deadline - time.monotonic()
        if rest > 0:
            time.sleep(rest)
        return False

    def _blpop(self, wake_keys: list[str], block_s: float) -> bool:
        # --- Redis Cluster: one BLPOP per shard (one slot each), awaited together
        if is_cluster(self._client):
            return cluster_blpop_any(self._client, wake_keys, block_s, _WAKE_GRACE_S)
        # --- one server or a Sentinel primary: one BLPOP over every shard's wake key
        pool = self._client.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_command("BLPOP", *wake_keys, f"{max(block_s, 0.001):.3f}")  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
            reply = conn.read_response(timeout=block_s + _WAKE_GRACE_S)
        except (redis.TimeoutError, redis.ConnectionError):
            conn.disconnect()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
            return False
        except BaseException:
            # interrupted (SIGTERM's shutdown exception) with the BLPOP still pending: its
            # late nil reply must not be read back as the next command's reply on this
            # connection (the pool hands the last released connection out first; a
            # Sentinel-managed connection is not dropped on errors by redis-py)
            conn.disconnect()  # type: ignore[no-untyped-call]  # as above
            raise
        finally:
            pool.release(conn)
        return reply is not None

    # ------------------------------------------------------------------ inspection
    def earliest_due_ms(self) -> int | None:
        """Lowest score over all shards (epoch ms), or None when nothing is pending."""
        best: int | None = None
        for keys in self.shard_keys():
            if int(self._client.zcard(keys.ready)):  # ready set (ADR 0006): due members waiting
                return self._now_ms()
            rows = cast(
                list[tuple[str, float]], self._client.zrange(keys.pending, 0, 0, withscores=True)
            )
            if rows and (best is None or int(rows[0][1]) < best):
                best = int(rows[0][1])
        return best

    def _earliest_due_incl_ready(self) -> int | None:
        """Earliest *due time* over pending and ready (a ready member's due = score + weight *
        aging_ms), looking at the 1000 best-scored ready members of each shard."""
        best: int | None = None
        for keys in self.shard_keys():
            rows = cast(list[tuple[str, float]],
                        self._client.zrange(keys.ready, 0, 999, withscores=True))
            first = cast(list[tuple[str, float]],
                         self._client.zrange(keys.pending, 0, 0, withscores=True))
            dues = [int(first[0][1])] if first else []
            if rows:
                weights = cast(list[str | None],
                               self._client.hmget(keys.prio, [m for m, _ in rows]))
                dues += [int(sc) + int(w or 0) * self.aging_ms
                         for (_, sc), w in zip(rows, weights, strict=True)]
            if dues and (best is None or min(dues) < best):
                best = min(dues)
        return best

    def payload(self, dispute_id: UUID | str) -> dict[str, str] | None:
        """The payload HASH of ``dispute_id`` (str -> str), or None if there is none."""
        fields = cast(
            dict[str, str], self._client.hgetall(self.keys_for(dispute_id).payload(dispute_id))
        )
        return fields or None

    def notified(self, wanted: Mapping[str, tuple[str, int]], count: int = 1000) -> set[str]:
        """The idempotency keys among ``wanted`` (dispute id -> (``<dispute>:<seq>``, decided
        epoch ms)) that already have an entry in their shard's review stream
        (:func:`review_notified`; read by the worker's STUCK_MEMBER repair only)."""
        return review_notified(self._client, self.namespace, self.shards, wanted, count)

    def pending_members(self, shard: int) -> Iterator[tuple[str, int]]:
        """ZSCAN of one shard's pending and ready ZSETs: ``(dispute id, due epoch ms)`` (for
        reconcile). A ready member's due is its ready score + weight * aging_ms."""
        check_range("shard", shard, 0, self.shards - 1)
        keys = Keys(self.namespace, shard)
        for member, score in self._client.zscan_iter(keys.pending):
            yield str(member), int(score)
        for member, score in self._client.zscan_iter(keys.ready):
            weight = int(cast(str, self._client.hget(keys.prio, member) or "0"))
            yield str(member), int(score) + weight * self.aging_ms

    def stats(self) -> dict[str, int | None]:
        """Numbers for ``escalation status`` summed over shards.

        Keys: pending (ZCARD pending + ZCARD ready), due_now (pending score <= Redis TIME, plus
        every ready member), oldest_overdue_ms (now - earliest
        due score, None when nothing is due), locked (lock keys, counted with SCAN), dead
        (ZCARD dead), plus every counter of the stats hashes (claimed, stuck, lock_contended,
        applied, stale_apply, not_owner, restore_held, missing, enqueued, cancelled).
        """
        now = self._now_ms()
        out: dict[str, int | None] = {"pending": 0, "due_now": 0, "locked": 0, "dead": 0}
        counters: dict[str, int] = defaultdict(int)
        for keys in self.shard_keys():
            ready = int(self._client.zcard(keys.ready))  # ready set (ADR 0006): due, waiting
            in_pending = int(self._client.zcard(keys.pending))
            out["pending"] = int(out["pending"] or 0) + in_pending + ready
            out["due_now"] = int(out["due_now"] or 0) + ready + int(
                self._client.zcount(keys.pending, "-inf", now)
            )
            out["dead"] = int(out["dead"] or 0) + int(self._client.zcard(keys.dead))
            locks = self._client.scan_iter(match=f"{keys.lock_prefix}*", count=1000)
            out["locked"] = int(out["locked"] or 0) + sum(1 for _ in locks)
            for name, value in cast(dict[str, str], self._client.hgetall(keys.stats)).items():
                counters[name] += int(value)
        earliest = self._earliest_due_incl_ready()
        out["oldest_overdue_ms"] = (
            now - earliest if earliest is not None and earliest <= now else None
        )
        out.update(counters)
        return out
