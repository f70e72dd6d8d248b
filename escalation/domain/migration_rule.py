"""The migration rule: may a planned ladder migration still be applied to a locked escalation?

A ladder migration is planned from a read of the projection, then applied in batches, each
in one transaction that locks the batch's projection rows first (docs/ladder-migrations.md).
Between the plan and the lock a worker may have decided an escalation (its ``seq`` moved),
closed it, or another apply may have migrated it. This module is the per-dispute ``seq``
guard that checks each planned item against its locked row, pure and typed; the PostgreSQL
adapter (``adapters.ladder_history``) calls it under its locks, as ``domain.record_rule`` is
called for a firing.

For each planned item:

- no locked row, a closed one (neither pending nor paused), or one already on the target
  version (or above): skipped, unchanged;
- a locked row at another ``seq`` or status than the plan's: re-planned from the locked
  state (a re-plan that is :class:`~escalation.domain.ladder_plan.Blocked` is left on its
  version);
- otherwise migrated as planned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple
from uuid import UUID

from escalation.domain.escalation import Status
from escalation.domain.ladder_plan import Blocked, PlanItem

OPEN: frozenset[Status] = frozenset({Status.PENDING, Status.PAUSED})
"""The statuses a migration moves (a closed escalation keeps its version)."""


class LockedHead(NamedTuple):
    """What the rule reads of a dispute's locked projection row.

    Attributes:
        status: the projection's status.
        last_seq: seq of the dispute's latest ledger row.
        ladder_version: the ladder version the escalation is pinned to.
    """

    status: Status
    last_seq: int
    ladder_version: int


Planned = tuple[PlanItem, "datetime | None"]
"""A planned item and its due time resolved at apply (None: no due time)."""


@dataclass(slots=True)
class Checked:
    """What the guard made of one batch.

    Attributes:
        moves: the items to migrate now, in batch order (re-planned ones replaced).
        replanned: items whose seq or status had moved and were re-planned.
        skipped: items closed, gone or already on the target version.
        blocked: re-planned items that can no longer be migrated.
        suppressed: moves whose due time the grace floor set (no retroactive breach).
    """

    moves: list[Planned] = field(default_factory=list)
    replanned: int = 0
    skipped: int = 0
    blocked: list[Blocked] = field(default_factory=list)
    suppressed: int = 0


def still_open_below(head: LockedHead | None, target_version: int) -> bool:
    """True when ``head`` is an open escalation pinned below ``target_version``."""
    return head is not None and head.status in OPEN and head.ladder_version < target_version


def check_batch(
    batch: Sequence[Planned],
    locked: Mapping[UUID, LockedHead],
    target_version: int,
    replan: Callable[[UUID], Planned | Blocked],
) -> Checked:
    """Check each planned item of ``batch`` against its locked row (see the module docstring).

    Args:
        batch: ``(planned item, resolved due time)`` pairs.
        locked: the locked heads by dispute id (a dispute with no row is absent).
        target_version: the version migrated to.
        replan: re-plans a dispute from its locked state (called only for an item whose
            seq or status moved).
    """
    out = Checked()
    for item, due in batch:
        head = locked.get(item.dispute_id)
        if head is None or not still_open_below(head, target_version):
            out.skipped += 1
            continue
        if head.last_seq != item.seq or head.status is not item.status:
            out.replanned += 1
            again = replan(item.dispute_id)
            if isinstance(again, Blocked):
                out.blocked.append(again)
                continue
            item, due = again  # noqa: PLW2901 - the re-planned item replaces it
        out.moves.append((item, due))
        if item.due.floor_set(due):
            out.suppressed += 1
    return out
