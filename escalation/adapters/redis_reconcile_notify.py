"""The Redis side of reconcile, notification delivery and dead letters (docs/reliability.md):
reconcile's inspection of the scheduled members, the review streams with their retries, and
the dead letters of poison escalations and undeliverable notifications.

Scripts live beside the scheduler's in ``adapters/lua/`` and are loaded the same way
(``script_source`` + ``register_script``). Every key of one call shares a shard's hash tag.
Times are epoch **milliseconds** (Redis ``TIME``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import redis
from redis.commands.core import Script

from escalation.adapters.redis_keys import Keys, shard_of
from escalation.adapters.redis_scheduler import (
    DEFAULT_AGING_MS,
    NOTIFIED_SLACK_MS,
    review_notified,
    run_script,
    script_source,
)
from escalation.domain.errors import NotFound
from escalation.ports import DEAD_DECISION, DEAD_NOTIFY, MemberState, NotifyRetry

RELIABILITY_SCRIPTS: tuple[str, ...] = (
    "reconcile_remove",
    "dead_letter",
    "dead_retry",
    "notify_defer",
    "notify_claim_retry",
    "release_lock",
)

__all__ = ["DEAD_DECISION", "DEAD_NOTIFY", "NOTIFIED_SLACK_MS", "MemberState", "ReliabilityRedis"]


class ReliabilityRedis:
    """Reliability scripts and reads for one namespace (``shards`` as the scheduler's);
    implements ``escalation.ports.SchedulerInspection``.

    Args:
        client: ``redis.Redis`` with ``decode_responses=True``.
        namespace / shards: as :class:`~escalation.adapters.redis_scheduler.RedisScheduler`.
        aging_ms: the scheduler's ``aging_ms`` (one materiality weight, milliseconds); only
            used to turn a ready score back into a due time (due = score + weight * aging_ms).

    Every read and script here treats a member of ``ready`` (ADR 0006) like a member of
    ``pending``: scheduled (and due).
    """

    def __init__(self, client: redis.Redis, namespace: str, shards: int = 1, *,
                 aging_ms: int = DEFAULT_AGING_MS) -> None:
        self.client = client
        self.namespace = namespace
        self.shards = shards
        self.aging_ms = aging_ms
        self._scripts: dict[str, Script] = {
            n: client.register_script(script_source(n)) for n in RELIABILITY_SCRIPTS
        }

    def keys_for(self, dispute_id: object) -> Keys:
        """``Keys`` of the shard holding ``dispute_id``."""
        return Keys(self.namespace, shard_of(str(dispute_id), self.shards))

    def shard_keys(self) -> list[Keys]:
        """``Keys`` of every shard."""
        return [Keys(self.namespace, s) for s in range(self.shards)]

    def run(self, name: str, keys: Sequence[str], args: Sequence[str | int]) -> Any:
        """Run one of :data:`RELIABILITY_SCRIPTS`. Raises ``ScriptRefused`` (an
        EscalationError and a ``redis.ResponseError``) when the script refuses its input."""
        return run_script(self._scripts[name], keys, args)

    def now_ms(self) -> int:
        """Redis ``TIME`` in epoch milliseconds (the one clock)."""
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    # ------------------------------------------------------------------ reconcile
    def inspect(self, dispute_ids: Sequence[str]) -> dict[str, MemberState]:
        """Payload seq, due time (pending or ready), lock and dead-letter flag of each id
        (one pipeline of 6 commands per id)."""
        width = 6
        pipe = self.client.pipeline(transaction=False)
        for d in dispute_ids:
            k = self.keys_for(d)
            pipe.hget(k.payload(d), "seq")
            pipe.zscore(k.pending, d)
            pipe.exists(k.lock(d))
            pipe.zscore(k.dead, DEAD_DECISION + d)
            pipe.zscore(k.ready, d)
            pipe.hget(k.prio, d)
        raw = pipe.execute()
        out: dict[str, MemberState] = {}
        for i, d in enumerate(dispute_ids):
            seq, score, locked, dead, rscore, weight = raw[width * i : width * i + width]
            due: int | None = None if score is None else int(float(score))
            if due is None and rscore is not None:
                due = int(float(rscore)) + _int_or(weight, 0) * self.aging_ms
            out[d] = MemberState(
                # a corrupt seq counts as 0: behind PostgreSQL, so reconcile rewrites it
                payload_seq=None if seq is None else _int_or(seq, 0),
                score_ms=due,
                locked=bool(locked),
                dead=dead is not None,
                ready=score is None and rscore is not None,
            )
        return out

    def notified(self, wanted: Mapping[str, tuple[str, int]], count: int = 1000) -> set[str]:
        """Which of the wanted notifications already have an entry in their review stream:
        :func:`~escalation.adapters.redis_scheduler.review_notified` (the scheduler's
        ``notified`` reads the same way; the worker's STUCK_MEMBER repair calls that one).

        Args:
            wanted: dispute id -> (idempotency key ``<dispute>:<seq>``, decided epoch ms).
            count: XRANGE page size.

        Returns:
            the idempotency keys found.
        """
        return review_notified(self.client, self.namespace, self.shards, wanted, count)

    def review_after(self, wanted: Mapping[str, tuple[int, int]],
                     count: int = 1000) -> dict[str, list[dict[str, str]]]:
        """Review-stream entries of decisions the ledger does not hold (ADR 0014).

        Args:
            wanted: dispute id -> (the ledger's seq, epoch ms from which to read: the
                ledger's last decision time; the stream is read from that minus
                :data:`NOTIFIED_SLACK_MS`).
            count: XRANGE page size.

        Returns:
            dispute id -> its entries whose ``seq`` is above the ledger's, oldest first,
            each the entry's fields plus ``entry_id``. An entry trimmed from the stream
            (MAXLEN) is not found.
        """
        by_shard: dict[int, tuple[dict[str, int], int]] = {}
        for did, (seq, since) in wanted.items():
            shard = shard_of(did, self.shards)
            seqs, first = by_shard.get(shard, ({}, since))
            seqs[did] = seq
            by_shard[shard] = (seqs, min(first, since))
        found: dict[str, list[dict[str, str]]] = {}
        for shard, (seqs, since) in by_shard.items():
            stream = Keys(self.namespace, shard).review
            start = str(max(since - NOTIFIED_SLACK_MS, 0))
            while True:
                page = cast(list[tuple[str, dict[str, str] | None]],
                            self.client.xrange(stream, start, "+", count=count))
                for entry_id, fields in page:
                    got = fields or {}
                    did = got.get("dispute_id", "")
                    if did in seqs and _int_or(got.get("seq"), -1) > seqs[did]:
                        found.setdefault(did, []).append({**got, "entry_id": str(entry_id)})
                if len(page) < count:
                    break
                start = "(" + str(page[-1][0])
        return found

    def scan_members(self, keys: Keys, count: int = 1000) -> list[list[tuple[str, int]]]:
        """The scheduled members of one shard in chunks of about ``count``: ``(member, due
        epoch ms)`` -- every member of pending (due = score), then every member of ready
        (ADR 0006; due = ready score + weight * aging_ms). A member moved from pending to
        ready between the two scans can appear twice; callers treat members as a set."""
        chunks: list[list[tuple[str, int]]] = []
        chunk: list[tuple[str, int]] = []
        for member, score in self.client.zscan_iter(keys.pending, count=count):
            chunk.append((str(member), int(score)))
            if len(chunk) >= count:
                chunks.append(chunk)
                chunk = []
        if chunk:
            chunks.append(chunk)
            chunk = []
        ready = [(str(m), int(sc)) for m, sc in self.client.zscan_iter(keys.ready, count=count)]
        for start in range(0, len(ready), count):
            part = ready[start : start + count]
            weights = cast(list[str | None], self.client.hmget(keys.prio, [m for m, _ in part]))
            chunks.append([(m, sc + int(w or 0) * self.aging_ms)
                           for (m, sc), w in zip(part, weights, strict=True)])
        return chunks

    def scan_shards(self, count: int = 1000) -> Iterator[list[list[tuple[str, int]]]]:
        """:meth:`scan_members` of every shard in turn, shard 0 first."""
        for keys in self.shard_keys():
            yield self.scan_members(keys, count)

    def ready_count(self) -> int:
        """Members in the ready ZSETs (due, waiting for a claim) over every shard."""
        return sum(int(self.client.zcard(k.ready)) for k in self.shard_keys())

    def remove_member(self, member: str, recorded_seq: int | None, mode: str) -> str:
        """reconcile_remove.lua: ``removed`` | ``locked`` | ``ahead`` | ``behind`` | ``absent``.

        ``recorded_seq`` None = PostgreSQL does not know the member; ``mode`` ``remove`` or
        ``unpark``. The member is cleared from pending and ready (ADR 0006); ``remove`` also
        drops its prio weight.
        """
        k = self.keys_for(member)
        seq = "-1" if recorded_seq is None else str(recorded_seq)
        return str(self.run("reconcile_remove",
                            [k.pending, k.payload(member), k.lock(member), k.ready, k.prio],
                            [member, seq, mode]))

    def members_without_payload(self) -> list[str]:
        """Pending or ready members with no payload HASH (STUCK_MEMBER), over every shard."""
        stuck: list[str] = []
        for keys in self.shard_keys():
            seen: set[str] = set()
            for raw in self.scan_members(keys):
                chunk = [(m, sc) for m, sc in raw if m not in seen]
                seen.update(m for m, _ in chunk)
                pipe = self.client.pipeline(transaction=False)
                for member, _ in chunk:
                    pipe.exists(keys.payload(member))
                for (member, _), exists in zip(chunk, pipe.execute(), strict=True):
                    if not exists:
                        stuck.append(member)
        return stuck

    # ------------------------------------------------------------------ dead letters
    def dead_list(self, limit: int = 100) -> list[tuple[str, int, dict[str, Any]]]:
        """Dead letters, oldest first: ``(member, dead-lettered ms, record)`` over shards."""
        rows: list[tuple[str, int, dict[str, Any]]] = []
        for keys in self.shard_keys():
            got = cast(list[tuple[str, float]],
                       self.client.zrange(keys.dead, 0, limit - 1, withscores=True))
            if not got:
                continue
            data = cast(list[str | None], self.client.hmget(keys.dead_data, [m for m, _ in got]))
            for (member, score), blob in zip(got, data, strict=True):
                rows.append((member, int(score), json.loads(blob) if blob else {}))
        rows.sort(key=lambda r: r[1])
        return rows[:limit]

    def dead_get(self, member: str) -> tuple[int, dict[str, Any]] | None:
        """``(dead-lettered ms, record)`` of one dead letter, or None."""
        for keys in self.shard_keys():
            score = self.client.zscore(keys.dead, member)
            if score is not None:
                blob = cast(str | None, self.client.hget(keys.dead_data, member))
                return int(score), json.loads(blob) if blob else {}
        return None

    def dead_keys_of(self, member: str) -> Keys | None:
        """The shard ``Keys`` whose dead set holds ``member``, or None."""
        for keys in self.shard_keys():
            if self.client.zscore(keys.dead, member) is not None:
                return keys
        return None

    def count_decision_failure(self, dispute_id: str) -> int:
        """Count one more failed decision of ``dispute_id``; returns the count so far."""
        keys = self.keys_for(dispute_id)
        return int(self.client.hincrby(keys.decision_failures, dispute_id, 1))

    def dead_letter_decision(self, dispute_id: str, token: int, record_json: str) -> int:
        """dead_letter.lua for a poison escalation whose claim ``token`` still holds the lock:
        out of pending/ready/prio, into the dead-letter set with ``record_json``. Returns the
        dead-lettered time (epoch ms), 0 when the lock is no longer this token's."""
        keys = self.keys_for(dispute_id)
        return int(self.run(
            "dead_letter",
            [keys.dead, keys.dead_data, keys.pending, keys.lock(dispute_id),
             keys.decision_failures, keys.notify_retry, keys.notify_data, keys.ready,
             keys.prio],
            [DEAD_DECISION + dispute_id, record_json, "decision", dispute_id, str(token), ""]))

    def retry_dead(self, member: str, kind: str, target: str, record_json: str) -> str:
        """dead_retry.lua: schedule dead letter ``member`` again, due now. ``kind``
        ``decision`` (``target`` = dispute id) or ``notify`` (``target`` = the notification's
        retry member, ``record_json`` its fresh retry record). Returns the script outcome.

        Raises:
            NotFound: ``member`` is not a dead letter of this namespace.
        """
        keys = self.dead_keys_of(member)
        if keys is None:
            raise NotFound(f"no dead letter {member!r}")
        kpay = keys.payload(target) if kind == "decision" else keys.stats
        return str(self.run("dead_retry",
                            [keys.dead, keys.dead_data, keys.pending, kpay,
                             keys.decision_failures, keys.notify_retry, keys.notify_data,
                             keys.ready, keys.prio],
                            [member, kind, target, record_json]))

    def purge_dead(self, member: str, dispute_id: str | None) -> None:
        """Remove dead letter ``member``; with ``dispute_id`` (a poison escalation) also its
        member in pending/ready, weight, payload and failure count, in one transaction."""
        keys = self.dead_keys_of(member)
        if keys is None:
            return
        pipe = self.client.pipeline(transaction=True)
        pipe.zrem(keys.dead, member)
        pipe.hdel(keys.dead_data, member)
        if dispute_id:
            pipe.zrem(keys.pending, dispute_id)
            pipe.zrem(keys.ready, dispute_id)  # a due member may wait in ready
            pipe.hdel(keys.prio, dispute_id)
            pipe.delete(keys.payload(dispute_id))
            pipe.hdel(keys.decision_failures, dispute_id)
        pipe.execute()

    # ------------------------------------------------------------------ review stream
    def review_shards(self) -> range:
        """Shard indexes, 0 first (one review stream per shard)."""
        return range(self.shards)

    def ensure_review_group(self, shard: int, group: str) -> None:
        """XGROUP CREATE on the shard's review stream from its start (idempotent)."""
        try:
            self.client.xgroup_create(Keys(self.namespace, shard).review, group, id="0",
                                      mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def review_autoclaim(
        self, shard: int, group: str, consumer: str, idle_ms: int, count: int
    ) -> list[tuple[str, dict[str, str] | None]]:
        """XAUTOCLAIM entries pending longer than ``idle_ms``: ``(entry id, fields)``, fields
        None for an entry trimmed from the stream while pending."""
        raw = self.client.xautoclaim(Keys(self.namespace, shard).review, group, consumer,
                                     min_idle_time=idle_ms, start_id="0-0", count=count)
        return [(str(e), f) for e, f in cast(list[Any], raw[1])]

    def review_read(
        self, shard: int, group: str, consumer: str, count: int, block_ms: int | None
    ) -> list[tuple[str, dict[str, str]]]:
        """XREADGROUP ``>``: new entries for ``consumer`` (blocking up to ``block_ms``)."""
        got = self.client.xreadgroup(group, consumer, {Keys(self.namespace, shard).review: ">"},
                                     count=count, block=block_ms)
        return [(str(e), f) for _stream, entries in cast(list[Any], got or [])
                for e, f in entries]

    def review_ack(self, shard: int, group: str, entry_id: str) -> None:
        """XACK one entry."""
        self.client.xack(Keys(self.namespace, shard).review, group, entry_id)

    def notify_claim_retries(self, shard: int, count: int, lease_ms: int) -> list[tuple[str, str]]:
        """notify_claim_retry.lua: due retries ``(member, record JSON)``, leased ``lease_ms``."""
        keys = Keys(self.namespace, shard)
        raw = self.run("notify_claim_retry", [keys.notify_retry, keys.notify_data],
                       [min(count, 1000), lease_ms])
        return [(str(m), str(b)) for m, b in raw[1:]]

    def notify_retry_done(self, shard: int, member: str) -> None:
        """Drop a delivered retry (ZREM + HDEL in one transaction)."""
        keys = Keys(self.namespace, shard)
        pipe = self.client.pipeline(transaction=True)
        pipe.zrem(keys.notify_retry, member)
        pipe.hdel(keys.notify_data, member)
        pipe.execute()

    def notify_retry_waiting(self, shard: int) -> list[tuple[str, int]]:
        """Every retry scheduled on ``shard``: ``(member, retry time epoch ms)``, earliest
        first (one ZRANGE of ``notify_retry``; the set holds only failed deliveries and the
        notifications held behind them)."""
        keys = Keys(self.namespace, shard)
        raw = cast(list[tuple[Any, float]],
                   self.client.zrange(keys.notify_retry, 0, -1, withscores=True))
        return [(m.decode() if isinstance(m, bytes) else str(m), int(score))
                for m, score in raw]

    def notify_defer(self, shard: int, retry: NotifyRetry) -> None:
        """notify_defer.lua: schedule a retry of ``retry.member`` at ``retry.at_ms`` (and
        XACK ``retry.entry_id`` when given)."""
        keys = Keys(self.namespace, shard)
        self.run("notify_defer", [keys.review, keys.notify_retry, keys.notify_data],
                 [retry.group, retry.entry_id, retry.member, retry.at_ms, retry.record_json])

    def dead_letter_notify(self, shard: int, member: str, record_json: str) -> int:
        """dead_letter.lua for an undeliverable notification (retry ``member``). Returns the
        dead-lettered time, epoch ms."""
        keys = Keys(self.namespace, shard)
        return int(self.run(
            "dead_letter",
            [keys.dead, keys.dead_data, keys.pending, keys.stats, keys.decision_failures,
             keys.notify_retry, keys.notify_data],
            [DEAD_NOTIFY + member, record_json, "notify", "", "", member]))

    def count_notification(self, shard: int, outcome: str) -> None:
        """HINCRBY ``notify_<outcome>`` in the shard's stats hash (read by the API's
        ``/metrics``)."""
        self.client.hincrby(Keys(self.namespace, shard).stats, f"notify_{outcome}", 1)

    def dead_count(self) -> int:
        """Number of dead letters over every shard."""
        return sum(int(self.client.zcard(k.dead)) for k in self.shard_keys())


def _int_or(value: object, default: int) -> int:
    """``int(value)``, or ``default`` for a missing or corrupt (non-integer) field."""
    try:
        return int(str(value)) if value is not None else default
    except ValueError:
        return default
