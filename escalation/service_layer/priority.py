"""Materiality priority under backlog (docs/sla.md; docs/adr/0006-ready-set.md).

When more escalations are due than the workers can fire, the claim picks the due members
with the highest *effective priority*::

    effective = band_weight + age_ms / aging_ms

(claim.lua moves due members into the shard's ready ZSET at score ``due - weight *
aging_ms`` and claims from its head, which is the same order).

``band_weight`` is 0 below every band of the escalation's pinned ladder, else 1 + the band's
index in ascending ``min_amount`` order (``sla_timing.band_weight``). Each ``aging_ms`` of
waiting is worth one band, so low-materiality escalations are never starved.

Starvation bound (docs/sla.md): a due escalation ``m`` (weight ``w``) is overtaken only by
escalations due before it, or due less than ``(W - w) * aging_ms`` after it, where ``W`` is the
highest weight in use. So ``m`` fires no later than a plain FIFO claim would fire an
escalation due ``(W - w) * aging_ms`` after ``m`` -- its extra wait is at most the time the
workers need to fire what becomes due in that span. The window always contains the oldest due
member, so the rule applies to it.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from functools import lru_cache

from escalation.domain.errors import EscalationError
from escalation.domain.sla_timing import band_weight
from escalation.ports import LadderSource

DEFAULT_AGING_MS = 300_000
"""One band of materiality is worth five minutes of waiting (settings.priority_aging_s)."""

PriorityFn = Callable[[str, str], int]
"""``(ladder key "<name>@<version>", materiality text) -> band weight`` (>= 0)."""


def weight_fn(ladders: LadderSource) -> PriorityFn:
    """A cached :data:`PriorityFn` over ``ladders``; unknown ladders / bad amounts weigh 0."""

    @lru_cache(maxsize=65_536)
    def weight(ladder_key: str, materiality: str) -> int:
        name, _, version = ladder_key.rpartition("@")
        try:
            ladder = ladders.get(name, int(version))
            return band_weight(ladder, Decimal(materiality))
        except (EscalationError, ValueError, ArithmeticError):
            return 0

    return weight


