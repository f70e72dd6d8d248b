"""Redis side of the reliability work (issue 7): reconcile inspection, dead letters.

Scripts live beside the scheduler's in ``adapters/lua/`` and are loaded the same way
(``script_source`` + ``register_script``). Every key of one call shares a shard's hash tag.
Times are epoch **milliseconds** (Redis ``TIME``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis
from redis.commands.core import Script

from escalation.adapters.redis_keys import Keys, shard_of
from escalation.adapters.redis_scheduler import script_source

RELIABILITY_SCRIPTS: tuple[str, ...] = (
    "reconcile_remove",
    "dead_letter",
    "dead_retry",
    "notify_defer",
    "notify_claim_retry",
    "leader_renew",
    "release_lock",
)
DEAD_DECISION = "decision:"  # dead-letter member prefix of a poison escalation
DEAD_NOTIFY = "notify:"  # dead-letter member prefix of an undeliverable notification


@dataclass(frozen=True, slots=True)
class MemberState:
    """What Redis holds for one dispute (reconcile inspection).

    Attributes:
        payload_seq: the payload's ``seq`` field, None when there is no payload.
        score_ms: ZSET score (epoch ms), None when not a member.
        locked: a lock key exists (a worker holds the claim).
        dead: the dispute is dead-lettered as a poison decision.
    """

    payload_seq: int | None
    score_ms: int | None
    locked: bool
    dead: bool


class ReliabilityRedis:
    """Reliability scripts and reads for one namespace (``shards`` as the scheduler's).

    Args:
        client: ``redis.Redis`` with ``decode_responses=True``.
        namespace / shards: as :class:`~escalation.adapters.redis_scheduler.RedisScheduler`.
    """

    def __init__(self, client: redis.Redis, namespace: str, shards: int = 1) -> None:
        self.client = client
        self.namespace = namespace
        self.shards = shards
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
        """Run one of :data:`RELIABILITY_SCRIPTS`."""
        return self._scripts[name](keys=list(keys), args=list(args))

    def now_ms(self) -> int:
        """Redis ``TIME`` in epoch milliseconds (the one clock)."""
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    # ------------------------------------------------------------------ reconcile
    def inspect(self, dispute_ids: Sequence[str]) -> dict[str, MemberState]:
        """Payload seq, score, lock and dead-letter flag of each id (one pipeline)."""
        pipe = self.client.pipeline(transaction=False)
        for d in dispute_ids:
            k = self.keys_for(d)
            pipe.hget(k.payload(d), "seq")
            pipe.zscore(k.pending, d)
            pipe.exists(k.lock(d))
            pipe.zscore(k.dead, DEAD_DECISION + d)
        raw = pipe.execute()
        out: dict[str, MemberState] = {}
        for i, d in enumerate(dispute_ids):
            seq, score, locked, dead = raw[4 * i : 4 * i + 4]
            out[d] = MemberState(
                payload_seq=None if seq is None else int(seq),
                score_ms=None if score is None else int(score),
                locked=bool(locked),
                dead=dead is not None,
            )
        return out

    def scan_members(self, keys: Keys, count: int = 1000) -> list[list[tuple[str, int]]]:
        """The pending ZSET of one shard in chunks of about ``count`` (member, score ms)."""
        chunks: list[list[tuple[str, int]]] = []
        chunk: list[tuple[str, int]] = []
        for member, score in self.client.zscan_iter(keys.pending, count=count):
            chunk.append((str(member), int(score)))
            if len(chunk) >= count:
                chunks.append(chunk)
                chunk = []
        if chunk:
            chunks.append(chunk)
        return chunks

    def remove_member(self, member: str, recorded_seq: int | None, mode: str) -> str:
        """reconcile_remove.lua: ``removed`` | ``locked`` | ``ahead`` | ``behind`` | ``absent``.

        ``recorded_seq`` None = PostgreSQL does not know the member; ``mode`` ``remove`` or
        ``unpark``.
        """
        k = self.keys_for(member)
        seq = "-1" if recorded_seq is None else str(recorded_seq)
        return str(self.run("reconcile_remove", [k.pending, k.payload(member), k.lock(member)],
                            [member, seq, mode]))

    def members_without_payload(self) -> list[str]:
        """ZSET members with no payload HASH (STUCK_MEMBER), over every shard."""
        stuck: list[str] = []
        for keys in self.shard_keys():
            for chunk in self.scan_members(keys):
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

    def dead_count(self) -> int:
        """Number of dead letters over every shard."""
        return sum(int(self.client.zcard(k.dead)) for k in self.shard_keys())
