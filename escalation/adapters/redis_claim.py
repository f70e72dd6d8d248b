"""Claim: the first step of the firing protocol on Redis (claim.lua), with its idle fast path.

Part of ``RedisScheduler`` (see ``redis_scheduler_base``). Shards are visited round-robin
from a random one; per shard the ready set is read and claim.lua locks members with fresh
fencing tokens and re-scores them to now + lease (the visibility timeout).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import structlog

from escalation.adapters.redis_keys import Keys
from escalation.adapters.redis_payload import claimed_payload_to_escalation
from escalation.adapters.redis_scheduler_base import (
    CLOCK_SLACK_MS,
    MAX_BATCH,
    MAX_CLAIM_ROUNDS,
    MAX_LEASE_MS,
    PROMOTE_MAX,
    SchedulerBase,
)
from escalation.adapters.redis_scripts import check_range
from escalation.domain.errors import InvalidInput
from escalation.domain.timeutil import from_ms
from escalation.ports import ClaimedItem, ClaimResult

log = structlog.get_logger("escalation.adapters.redis_scheduler")


@dataclass
class _ShardClaim:
    now_ms: int
    items: list[ClaimedItem] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    contended: int = 0
    next_due_ms: int | None = None


class ClaimMixin(SchedulerBase):
    """``claim`` and its per-shard steps."""

    def claim(self, batch_size: int, lease_ms: int, worker_id: str) -> ClaimResult:
        """Claim up to ``batch_size`` due members (claim.lua; docs/architecture.md, firing step 1).

        Shards are visited round-robin from a random one. Per shard: read a window of the
        earliest members (by rank, no client clock), run claim.lua on it; if the window was all
        contended / taken by other workers, try the next window (at most ``MAX_CLAIM_ROUNDS``).

        Args:
            batch_size: 1..500 members.
            lease_ms: lock TTL and visibility timeout, milliseconds (1..86 400 000).
            worker_id: non-empty, at most 200 characters; stored as ``"<token>:<worker_id>"``.

        Returns:
            ClaimResult (now = the latest Redis TIME seen over the shards visited: a script's
            clock, or when no script ran the estimate described in ``_claim_shard``;
            next_due_ms = minimum over the shards visited).

        Raises:
            InvalidInput: an argument out of range.
        """
        check_range("batch_size", batch_size, 1, MAX_BATCH)
        check_range("lease_ms", lease_ms, 1, MAX_LEASE_MS)
        if not worker_id or len(worker_id) > 200:
            raise InvalidInput("worker_id must be 1..200 characters")
        start = random.randrange(self.shards)
        order = [(start + i) % self.shards for i in range(self.shards)]
        total: _ShardClaim | None = None
        for shard in order:
            need = batch_size - (len(total.items) if total else 0)
            if need <= 0:
                break
            part = self._claim_shard(Keys(self.namespace, shard), need, lease_ms, worker_id)
            if total is None:
                total = part
                continue
            total.now_ms = max(total.now_ms, part.now_ms)  # the latest clock seen
            total.items += part.items
            total.stuck += part.stuck
            total.contended += part.contended
            if part.next_due_ms is not None and (
                total.next_due_ms is None or part.next_due_ms < total.next_due_ms
            ):
                total.next_due_ms = part.next_due_ms
        assert total is not None  # noqa: S101 -- shards >= 1 and batch_size >= 1
        return ClaimResult(
            now=from_ms(total.now_ms),
            items=total.items,
            stuck=total.stuck,
            contended=total.contended,
            next_due_ms=total.next_due_ms,
        )

    def _claim_shard(self, keys: Keys, need: int, lease_ms: int, worker_id: str) -> _ShardClaim:
        """claim.lua on one shard (ADR 0006 ready set: pending -> ready by effective priority, then
        claim the head of ready). Candidates are read from ``ready`` before each call; the
        script only claims those still in the head, so the order is exact.

        Idle cost (docs/performance.md, "Idle worker"): when nothing is claimable this makes
        exactly one Redis command, ``ZRANGE pending 0 0 WITHSCORES``, and no script call:

        * the ``ready`` read is skipped while this scheduler's last claim script on the shard
          reported ``ready`` empty. Only claim.lua puts members into ``ready``, and a claim
          that leaves members there returned a full batch (the worker loops again at once)
          and pushes the wake marker (:meth:`_nudge`) so that other workers, whose flag may
          say "empty", wake up and look at ``ready`` too (a wake sets the flag again).
        * "is the first pending member due" is answered with an *estimate* of Redis time
          (last TIME seen + host monotonic time since, re-read every ``CLOCK_RESYNC_S``).
          The estimate (which lags Redis by up to a millisecond or two: truncation and the
          reply's trip) only decides whether to call the script: a first member due within
          ``CLOCK_SLACK_MS`` of it gets the call, and the script re-checks every member
          against Redis TIME, so nothing is ever claimed early, and a member made due
          "now" by another client a moment ago is not missed.
        """
        shard = keys.shard
        if not self._ready_maybe.get(shard, True):
            cheap = self._idle_check(keys)
            if cheap is not None:
                return cheap
        result: _ShardClaim | None = None
        offset = 0  # locked members seen at the top of ready
        for _ in range(MAX_CLAIM_ROUNDS):
            window = cast(list[str], self._client.zrange(keys.ready, offset, offset + need - 1))
            if not window and result is None:
                cheap = self._idle_check(keys)
                if cheap is not None:
                    self._ready_maybe[shard] = False
                    return cheap
            kargs = [keys.pending, keys.fence, keys.stats, keys.ready, keys.prio]
            for member in window:
                kargs += [keys.payload(member), keys.lock(member)]
            raw = self._run("claim", kargs, [lease_ms, worker_id, need, self.aging_ms,
                                             PROMOTE_MAX, offset, *window])
            now_ms, next_due, contended, more, stuck, items, _promoted = raw
            if result is None:
                result = _ShardClaim(now_ms=int(now_ms))
            result.now_ms = self._synced(int(now_ms))  # the latest script clock
            result.next_due_ms = None if int(float(next_due)) < 0 else int(float(next_due))
            result.contended += int(contended)
            result.stuck += [str(s) for s in stuck]
            self._parse_items(items, result)
            need -= len(items) // 4
            offset += int(contended)
            if need <= 0 or (not int(more) and not int(contended)):
                break
        assert result is not None  # noqa: S101 -- MAX_CLAIM_ROUNDS >= 1
        # claim.lua reports next_due = now while ready still holds members.
        left = result.next_due_ms is not None and result.next_due_ms <= result.now_ms
        if left:
            self._nudge(keys)
        self._ready_maybe[shard] = left
        return result

    def _idle_check(self, keys: Keys) -> _ShardClaim | None:
        """One ``ZRANGE pending 0 0 WITHSCORES``: a ``_ShardClaim`` saying "nothing due"
        (now = estimated Redis time), or None when the first member looks due (call the
        script)."""
        first = cast(list[tuple[str, float]],
                     self._client.zrange(keys.pending, 0, 0, withscores=True))
        now_ms = self._estimated_now_ms()
        if first and int(first[0][1]) <= now_ms + CLOCK_SLACK_MS:
            return None  # due, or nearly: the script decides on Redis TIME
        return _ShardClaim(now_ms=now_ms, next_due_ms=int(first[0][1]) if first else None)

    def _nudge(self, keys: Keys) -> None:
        """Push the shard's wake marker (LPUSH + LTRIM to one element, like enqueue.lua):
        members were left in ``ready``; other workers must look at it."""
        pipe = self._client.pipeline(transaction=False)
        pipe.lpush(keys.wake, "1")
        pipe.ltrim(keys.wake, 0, 0)
        pipe.execute()

    @staticmethod
    def _parse_items(items: Sequence[Any], result: _ShardClaim) -> None:
        """claim.lua's flat items (id, token, due_ms, payload per claimed member) into
        ``result.items``; a payload that does not decode is logged and left out."""
        for at in range(0, len(items) - 3, 4):
            member, token, score, flat = items[at], items[at + 1], items[at + 2], items[at + 3]
            try:
                esc = claimed_payload_to_escalation(member, flat)
            except InvalidInput as exc:
                # Left locked and re-scored: it comes due again after the lease; reconcile
                # (restore from PostgreSQL) is the repair. One bad payload must not cost
                # the batch.
                log.error("escalation.payload_corrupt", dispute_id=member, error=str(exc))
                continue
            result.items.append(ClaimedItem(esc, int(token), int(float(score))))
