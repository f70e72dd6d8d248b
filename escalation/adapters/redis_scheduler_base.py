"""State and clock shared by the parts of the Redis scheduler (``RedisScheduler``).

The scheduler is one class assembled from cohesive parts: this base (constructor, key
builders, the script runner, the Redis TIME clock), ``redis_claim`` (claim), ``redis_inspection``
(inspection, wake-ups, the single-step operations) and ``redis_scheduler`` (enqueue,
apply, restore, cancel).

Times: scores and payload times are epoch **milliseconds** UTC; the only clock consulted for
"is it due" is Redis ``TIME`` (inside the scripts, or via ``time()``), never the host clock.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import redis
from redis.commands.core import Script

from escalation.adapters.redis_keys import Keys, shard_of
from escalation.adapters.redis_scripts import check_range, run_script, script_source
from escalation.domain.errors import InvalidInput
from escalation.domain.timeutil import from_ms

SCRIPT_NAMES: tuple[str, ...] = (
    "enqueue",
    "pop_if_due",
    "release_lock",
    "claim",
    "apply",
    "cancel",
    "warn_claim",  # pre-breach warnings: used by adapters.redis_warnings.RedisWarnings
)
MAX_BATCH = 500  # batch_size range 1-500 (docs/operations.md, configuration)
MAX_LEASE_MS = 86_400_000  # claim.lua refuses longer leases
MAX_CLAIM_ROUNDS = 4  # candidate windows tried per shard before giving up on contention
REVIEW_MAXLEN = 100_000  # approximate MAXLEN of the review stream
PROMOTE_MAX = 1000  # claim.lua moves at most this many due members pending -> ready per call
DEFAULT_AGING_MS = 300_000  # one materiality weight = 5 minutes of waiting (docs/sla.md)
_WAKE_GRACE_S = 1.0  # socket guard beyond the BLPOP timeout
WAKE_MARGIN_S = 0.15  # last part of a wait slept locally (Redis hz 10 = 100 ms timer steps)
CLOCK_RESYNC_S = 60.0  # an idle claim re-reads Redis TIME at most this often (see claim)
CLOCK_SLACK_MS = 10  # a member due within this of the estimated Redis time gets a script call


class SchedulerBase:
    """Shared state of ``RedisScheduler``: pending ZSET + payload HASH + lock per escalation,
    N shards.

    Args:
        client: a ``redis.Redis`` created with ``decode_responses=True``.
        namespace: key namespace (hash tag ``{<namespace>:<shard>}``, see ``Keys``).
        shards: number of shards (>= 1); a dispute lives in ``shard_of(dispute_id, shards)``.
        priority: materiality weight of an escalation, ``(ladder key, materiality text) ->
            weight >= 0``, written at enqueue (bootstrap passes
            ``service_layer.priority.weight_fn(ladders)``); None = plain due order.
        aging_ms: waiting time worth one weight, milliseconds (claim.lua's aging; 1..86 400 000).

    Raises:
        InvalidInput: ``shards`` < 1, an empty namespace, or ``aging_ms`` out of range.
    """

    def __init__(
        self, client: redis.Redis, namespace: str = "esc", shards: int = 1, *,
        priority: Callable[[str, str], int] | None = None, aging_ms: int = DEFAULT_AGING_MS,
    ) -> None:
        if not namespace:
            raise InvalidInput("namespace must not be empty")
        check_range("shards", shards, 1, 1_000_000)
        check_range("aging_ms", aging_ms, 1, 86_400_000)  # claim.lua refuses more
        self._client = client
        self.namespace = namespace
        self.shards = shards
        self.priority = priority
        self.aging_ms = aging_ms
        self._scripts: dict[str, Script] = {
            name: client.register_script(script_source(name)) for name in SCRIPT_NAMES
        }
        # Idle-cost state (docs/performance.md, "Idle worker"): shards whose ``ready`` ZSET may
        # hold members (True until a claim script reports it empty, again after a wake), and the
        # last Redis TIME seen with the host monotonic instant it was seen at (an estimate of
        # Redis time).
        self._ready_maybe: dict[int, bool] = {}
        self._clock: tuple[int, float] | None = None

    # ------------------------------------------------------------------ helpers
    def keys_for(self, dispute_id: UUID | str) -> Keys:
        """The ``Keys`` of the shard holding ``dispute_id``."""
        return Keys(self.namespace, shard_of(str(dispute_id), self.shards))

    def shard_keys(self) -> list[Keys]:
        """``Keys`` of every shard, shard 0 first."""
        return [Keys(self.namespace, s) for s in range(self.shards)]

    def _run(self, name: str, keys: Sequence[str], args: Sequence[str | bytes | int]) -> Any:
        return run_script(self._scripts[name], keys, args)

    # ------------------------------------------------------------------ clock
    def time(self) -> datetime:
        """Redis ``TIME`` as an aware UTC datetime (millisecond precision): the one clock."""
        return from_ms(self._now_ms())

    def _now_ms(self) -> int:
        seconds, micros = self._client.time()
        return self._synced(int(seconds) * 1000 + int(micros) // 1000)

    def _synced(self, redis_ms: int) -> int:
        """Remember ``redis_ms`` (a Redis TIME just read) for :meth:`_estimated_now_ms`."""
        self._clock = (redis_ms, time.monotonic())
        return redis_ms

    def estimated_now_ms(self) -> int:
        """Redis time, epoch milliseconds, estimated as in :meth:`_estimated_now_ms` (at most
        one ``TIME`` per ``CLOCK_RESYNC_S``, shared with the idle claim). For clocks that
        only pick an occurrence or a wake-up (maintenance), never for "is it due"."""
        return self._estimated_now_ms()

    def _estimated_now_ms(self) -> int:
        """Redis time estimated from the last TIME seen plus the host *monotonic* time since
        (no wall-clock comparison); re-reads TIME when the last sync is older than
        ``CLOCK_RESYNC_S`` (or none exists). Used only to decide whether a claim script call
        is worth making: the script itself decides what is due, on Redis TIME."""
        clock = self._clock
        mono = time.monotonic()
        if clock is None or mono - clock[1] > CLOCK_RESYNC_S:
            return self._now_ms()
        return clock[0] + int((mono - clock[1]) * 1000)

    def _by_shard(self, ids: Sequence[UUID | str]) -> dict[int, list[int]]:
        """Indexes of ``ids`` grouped by shard (one shard: no id is hashed or formatted)."""
        if self.shards <= 1:
            return {0: list(range(len(ids)))} if ids else {}
        groups: dict[int, list[int]] = defaultdict(list)
        for i, dispute_id in enumerate(ids):
            groups[shard_of(str(dispute_id), self.shards)].append(i)
        return groups
