"""The reconcile ports: reconcile's view of the scheduled members (``SchedulerInspection``,
``MemberState``, the dead-letter member prefixes) and the resync mark (ADR 0014).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

DEAD_DECISION = "decision:"
"""Dead-letter member prefix of a poison escalation: ``decision:<dispute id>``."""
DEAD_NOTIFY = "notify:"
"""Dead-letter member prefix of an undeliverable notification: ``notify:<group>|<id>:<seq>``."""


@dataclass(frozen=True, slots=True)
class NotifyRetry:
    """A notification scheduled for another delivery attempt (``ReviewStreams.notify_defer``).

    ``group``: the consumer group; ``entry_id``: the review stream entry to acknowledge with
    it ("" when the notification already sits in the retry set); ``member``: its retry
    member (``<group>|<idempotency key>``); ``at_ms``: when it is due again, epoch ms;
    ``record_json``: the retry record (fields, attempts, last error, group) as JSON.
    """

    group: str
    entry_id: str
    member: str
    at_ms: int
    record_json: str


@dataclass(frozen=True, slots=True)
class MemberState:
    """What Redis holds for one dispute (reconcile inspection).

    Attributes:
        payload_seq: the payload's ``seq`` field, None when there is no payload.
        score_ms: due time (epoch ms) if the dispute is scheduled -- its pending score, or for a
            member of the ready ZSET (due, waiting for a claim) its ready score +
            weight * aging_ms -- None when it is in neither.
        locked: a lock key exists (a worker holds the claim).
        dead: the dispute is dead-lettered as a poison decision.
        ready: the member sits in the ready ZSET (scheduled and due).
    """

    payload_seq: int | None
    score_ms: int | None
    locked: bool
    dead: bool
    ready: bool = False


class SchedulerInspection(Protocol):
    """Reads and owner-less repairs of the scheduler's Redis state that reconcile needs
    (adapter: ``adapters.redis_reconcile_notify.ReliabilityRedis``)."""

    def inspect(self, dispute_ids: Sequence[str]) -> dict[str, MemberState]:
        """Payload seq, due time, lock and dead-letter flag of each dispute id."""
        ...

    def scan_shards(self, count: int = 1000) -> Iterator[list[list[tuple[str, int]]]]:
        """Per shard, its scheduled members in chunks of about ``count``: ``(member, due
        epoch ms)``. A member may appear twice within one shard (callers use sets)."""
        ...

    def remove_member(self, member: str, recorded_seq: int | None, mode: str) -> str:
        """Remove (``mode`` "remove") or unpark a member the ledger does not schedule:
        ``removed`` | ``locked`` | ``ahead`` | ``behind`` | ``absent``."""
        ...

    def notified(self, wanted: Mapping[str, tuple[str, int]], count: int = 1000) -> set[str]:
        """The idempotency keys among ``wanted`` (dispute id -> (``<dispute>:<seq>``, decided
        epoch ms)) that already have an entry in their shard's review stream."""
        ...


class ResyncMark(Protocol):
    """The namespace's resync mark: set while Redis may be ahead of the ledger (a restore to
    an earlier point, a failover that lost commits); workers refuse to fire the namespace
    while it is set, ``reconcile`` resets Redis to the ledger and clears it (adapter:
    ``adapters.redis_client.NamespaceBinding``; ADR 0014)."""

    def resync(self) -> dict[str, Any] | None:
        """The mark (``{"reason", "since_ms", "detail"}``), or None when not set."""
        ...

    def mark_resync(self, reason: str, detail: str = "") -> None:
        """Set the mark unless set already (``reason``: a code such as ``ahead_on_claim``)."""
        ...

    def clear_resync(self) -> bool:
        """Delete the mark; True when one was set."""
        ...


