"""Pre-breach warnings in Redis (docs/sla.md): one ZSET per shard, ``Keys.warnings``.

Member ``"<dispute id>:<seq>:<fraction>"`` (``seq`` = the ledger seq at which the tier was
entered, ``fraction`` like ``0.50``), score = warning time in epoch **ms**. ``schedule`` adds
members (ZADD NX: re-scheduling the same warning changes nothing); ``claim`` takes due ones
atomically with ``warn_claim.lua`` (Redis TIME, ZREM in the same script), which also returns the
earliest warning left (``next_due_ms``): the worker runs its warnings pass only when that time
has passed or after a wake (so an idle worker stays cheap). ``schedule`` therefore pushes the
shard's wake marker whenever a new member became the earliest of its ZSET, so a warning
scheduled earlier than the time a worker cached is never late.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import cast
from uuid import UUID

import redis

from escalation.adapters.redis_keys import Keys, shard_of
from escalation.adapters.redis_scheduler import script_source
from escalation.domain.errors import InvalidInput
from escalation.domain.timeutil import from_ms
from escalation.ports import WarningMember

__all__ = ["MAX_WARN_CLAIM", "RedisWarnings", "WarningMember"]

MAX_WARN_CLAIM = 1000


class RedisWarnings:
    """The warnings ZSETs of a namespace (same sharding as ``RedisScheduler``); implements
    ``escalation.ports.WarningQueue``.

    Args:
        client: ``redis.Redis`` with ``decode_responses=True``.
        namespace, shards: as the scheduler's.
    """

    def __init__(self, client: redis.Redis, namespace: str, shards: int = 1) -> None:
        self._client = client
        self.namespace = namespace
        self.shards = shards
        self._claim = client.register_script(script_source("warn_claim"))
        self.next_due_ms: int | None = None
        """Earliest warning left after the last :meth:`claim` (epoch ms), None = none."""

    def keys_for(self, dispute_id: UUID | str) -> Keys:
        """Keys of the shard holding ``dispute_id``."""
        return Keys(self.namespace, shard_of(str(dispute_id), self.shards))

    def schedule(self, members: Sequence[WarningMember]) -> int:
        """ZADD NX each member at its due time (one pipeline). Returns how many were new.

        Then, per shard touched, if the earliest member of the warnings ZSET is one just
        added, LPUSH the shard's wake marker (LTRIM to one element, as enqueue.lua does):
        a worker caching an earlier-computed next warning time wakes and re-reads it.
        Correct without atomicity: a member earlier than the new one was either there when
        the worker claimed (then the worker's cached time is not later than it) or was
        added after, and its own ``schedule`` pushed the marker.
        """
        return self.schedule_members([(m.member, m.due_ms) for m in members])

    def schedule_members(self, members: Sequence[tuple[str, int]]) -> int:
        """:meth:`schedule` of members already rendered as ``(member text, due epoch ms)``
        (``WarningMember.member`` and ``due_ms``: the CSV import renders them per row from
        the warnings of the row's shape). Returns how many were new."""
        if not members:
            return 0
        by_shard: dict[int, dict[str, int]] = {}
        for member, due_ms in members:
            shard = shard_of(member.partition(":")[0], self.shards)
            by_shard.setdefault(shard, {})[member] = due_ms
        shards = sorted(by_shard)
        pipe = self._client.pipeline(transaction=False)
        for shard in shards:  # one multi-member ZADD NX per shard, then its first member
            key = Keys(self.namespace, shard).warnings
            pipe.zadd(key, by_shard[shard], nx=True)
            pipe.zrange(key, 0, 0)
        replies = pipe.execute()
        added = sum(int(x) for x in replies[0::2])
        if not added:
            return 0
        pipe = self._client.pipeline(transaction=False)
        nudged = False
        for shard, first in zip(shards, replies[1::2], strict=True):
            if first and str(first[0]) in by_shard[shard]:
                wake = Keys(self.namespace, shard).wake
                pipe.lpush(wake, "1")
                pipe.ltrim(wake, 0, 0)
                nudged = True
        if nudged:
            pipe.execute()
        return added

    def claim(self, max_items: int) -> tuple[datetime, list[WarningMember]]:
        """Take up to ``max_items`` due warnings over all shards (each handed out once).

        Returns:
            (Redis TIME of the last script call, members earliest first); malformed members
            are dropped.

        Raises:
            InvalidInput: ``max_items`` outside 1..1000.
        """
        if not 1 <= max_items <= MAX_WARN_CLAIM:
            raise InvalidInput(f"max_items must be 1..{MAX_WARN_CLAIM}, got {max_items}")
        out: list[WarningMember] = []
        now_ms = 0
        nexts: list[int] = []
        for shard in range(self.shards):
            need = max_items - len(out)
            if need <= 0:
                nexts.append(now_ms)  # shard not visited: look again at once
                break
            now, flat, next_ms = self._claim(keys=[Keys(self.namespace, shard).warnings],
                                             args=[need])
            now_ms = int(now)
            if int(next_ms) >= 0:
                nexts.append(int(next_ms))
            for i in range(0, len(flat) - 1, 2):
                try:
                    out.append(WarningMember.parse(str(flat[i]), float(flat[i + 1])))
                except InvalidInput:
                    continue
        out.sort(key=lambda m: m.due_ms)
        if len(out) >= max_items:
            nexts.append(now_ms)  # a full batch: more may be due now
        self.next_due_ms = min(nexts) if nexts else None
        return from_ms(now_ms), out

    def pending(self, dispute_id: UUID | str) -> list[tuple[str, int]]:
        """Scheduled warnings of one dispute: ``(member, due ms)`` (inspection / tests)."""
        key = self.keys_for(dispute_id).warnings
        rows = cast(list[tuple[str, float]], self._client.zrange(key, 0, -1, withscores=True))
        prefix = f"{dispute_id}:"
        return [(str(m), int(s)) for m, s in rows if str(m).startswith(prefix)]
