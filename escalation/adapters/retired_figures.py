"""Decision figures of ledger partitions removed by retention, kept in Redis.

``/metrics`` reports ``escalation_decisions_total`` and ``escalation_firing_lag_seconds``
from the ledger rows. Retention (``escalation audit partitions drop-expired``) removes whole
partitions, so those counts alone would fall. Before a removal commits, the partition's
figures are saved here (one field per partition: saving again overwrites, so a retried
removal never counts twice); the scrape adds the saved figures of every partition that is no
longer attached (``metrics_queries.decisions``). Key: ``escalations:{ns:0}:retired_decisions``
(HASH partition name -> JSON figures; docs/operations.md "Counters across retention").
"""

from __future__ import annotations

import json

import redis

from escalation.adapters.redis_keys import Keys
from escalation.ports import DecisionFigures


class RedisRetiredFigures:
    """Save and load the decision figures of removed ledger partitions.

    Args:
        client: Redis client (``decode_responses`` either way).
        namespace: the scheduler namespace (the key lives on its shard 0).
    """

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.key = Keys(namespace, 0).retired_decisions

    def save(self, partition: str, figures: DecisionFigures) -> None:
        """Store ``figures`` for ``partition`` (HSET; the same partition overwrites)."""
        blob = {"by_kind": figures.by_kind, "lag_count": figures.lag_count,
                "lag_sum_s": figures.lag_sum_s,
                "lag_buckets": [[b, c] for b, c in figures.lag_buckets.items()]}
        self.client.hset(self.key, partition, json.dumps(blob, sort_keys=True))

    def load(self) -> dict[str, DecisionFigures]:
        """Every saved partition -> its figures (empty when retention never removed one)."""
        out: dict[str, DecisionFigures] = {}
        raw = self.client.hgetall(self.key)
        for name, blob in raw.items():
            data = json.loads(blob)
            key = name.decode() if isinstance(name, bytes) else str(name)
            out[key] = DecisionFigures(
                by_kind={str(k): int(v) for k, v in data["by_kind"].items()},
                lag_buckets={float(b): int(c) for b, c in data["lag_buckets"]},
                lag_count=int(data["lag_count"]), lag_sum_s=float(data["lag_sum_s"]))
        return out
