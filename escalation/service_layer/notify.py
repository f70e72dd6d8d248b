"""Use case: deliver review-queue notifications, with retries and a dead-letter set.

A promotion's notification is XADDed to the shard's review STREAM by apply.lua in the same
script that applies the decision. This module is the consumer side:

- one consumer group per review queue: ``notify`` (every tier) or ``notify.<tier>`` (only
  entries whose ``to_tier`` is that tier; other entries are acknowledged and skipped);
- ``XREADGROUP`` new entries; deliver each to the optional webhook (``Idempotency-Key`` =
  ``<dispute id>:<seq>``), up to ``concurrency`` at once (on the ports' ``fanout``) but one
  dispute's in ``seq`` order and one at a time (see :class:`Notifier`); ``XACK`` on success;
- on failure: ``notify_defer.lua`` acknowledges the entry and schedules the next attempt in
  the ``notify_retry`` ZSET at ``now + RetryPolicy.delay`` (full jitter);
  retries are claimed with ``notify_claim_retry.lua`` (visibility timeout, so a crash
  mid-delivery re-delivers);
- after ``policy.max_attempts`` failures the notification moves to the dead-letter set
  (``dead_letter.lua``) and a ``DEAD_LETTERED`` ledger row is appended;
- a crashed consumer's pending entries (delivered to it, never acknowledged) are taken over
  with ``XAUTOCLAIM`` once idle for ``idle_ms``.

Delivery is at-least-once; the idempotency key lets a receiver drop repeats.

Ledger semantics of a dead-lettered notification: ``append_event`` puts a ``DEAD_LETTERED``
row on the dispute's own hash chain (one audit trail per dispute), which bumps the dispute's
sequence number. The Redis payload is then brought to the new seq with ``scheduler.restore``
(seq-guarded; skipped while a worker holds the claim). If a worker holds it, its record step
sees STALE and applies the recorded state instead of deciding; the member is re-scored to its
recorded due time and decided by the next batch -- one wasted claim, never a lost or double
decision (the ``ledger`` projection status and due time are unchanged by the row).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

import structlog

from escalation.domain.errors import DatabaseReadOnly, EscalationError, InvalidInput
from escalation.domain.escalation import parse_dispute_id
from escalation.domain.retry import RetryPolicy
from escalation.domain.timeutil import from_ms
from escalation.ports import EventLog, LedgerEvent, NotifyRetry, Scheduler
from escalation.service_layer.core import ONE_BY_ONE, Fanout


class ReviewStreams(Protocol):
    """The review streams (one per shard) that notifications are read from, with their retry
    and dead-letter scripts (adapter: ``adapters.redis_reconcile_notify.ReliabilityRedis``; see
    ``service_layer.notify``). Entry fields and ids are strings."""

    def now_ms(self) -> int:
        """Redis TIME, epoch milliseconds."""
        ...

    def review_shards(self) -> range:
        """Shard indexes, 0 first."""
        ...

    def ensure_review_group(self, shard: int, group: str) -> None:
        """Create consumer group ``group`` on the shard's stream (idempotent)."""
        ...

    def review_autoclaim(
        self, shard: int, group: str, consumer: str, idle_ms: int, count: int
    ) -> list[tuple[str, dict[str, str] | None]]:
        """Take over entries pending longer than ``idle_ms`` (fields None: trimmed)."""
        ...

    def review_read(
        self, shard: int, group: str, consumer: str, count: int, block_ms: int | None
    ) -> list[tuple[str, dict[str, str]]]:
        """New entries for ``consumer`` (blocking up to ``block_ms``; None = no block)."""
        ...

    def review_ack(self, shard: int, group: str, entry_id: str) -> None:
        """Acknowledge one entry."""
        ...

    def notify_claim_retries(self, shard: int, count: int, lease_ms: int) -> list[tuple[str, str]]:
        """Due retries ``(member, record JSON)``, leased for ``lease_ms``."""
        ...

    def notify_retry_done(self, shard: int, member: str) -> None:
        """Drop a delivered retry."""
        ...

    def notify_retry_waiting(self, shard: int) -> list[tuple[str, int]]:
        """Every retry scheduled on the shard, ``(member, retry time epoch ms)``, earliest
        first (members of every consumer group; ``<group>|<dispute id>:<seq>``)."""
        ...

    def notify_defer(self, shard: int, retry: NotifyRetry) -> None:
        """Schedule a retry at ``retry.at_ms`` (acknowledging ``retry.entry_id`` when
        given)."""
        ...

    def dead_letter_notify(self, shard: int, member: str, record_json: str) -> int:
        """Dead-letter an undeliverable notification; dead-lettered time, epoch ms."""
        ...

    def count_notification(self, shard: int, outcome: str) -> None:
        """Count one delivery attempt (``outcome``: ``delivered`` or ``failed``) in the
        shard's stats, which the API's ``/metrics`` reads."""
        ...


log = structlog.get_logger("escalation.notify")

Deliver = Callable[[Mapping[str, str]], object]
DEFAULT_GROUP = "notify"


@dataclass
class NotifyReport:
    """Counts of one :meth:`Notifier.run_once` (or, via :meth:`add`, of a whole run).

    ``delivered``: posted to the webhook and acknowledged; ``acknowledged``: acknowledged
    *without delivery* because no webhook is configured (the stream is then the only review
    queue); ``deferred``: failed deliveries scheduled for a retry; ``dead``: dead-lettered;
    ``skipped``: entries of another tier (group ``notify.<tier>``); ``recovered``: entries
    taken over from a crashed consumer (also counted in one of the above); ``held``:
    scheduled behind an earlier notification of the same dispute that waits for a retry
    (not a failed attempt).
    """

    delivered: int = 0
    deferred: int = 0
    dead: int = 0
    skipped: int = 0
    recovered: int = 0
    acknowledged: int = 0
    held: int = 0

    def add(self, other: NotifyReport) -> None:
        """Add ``other``'s counts to this report (in place)."""
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def handled(self) -> int:
        """Entries handled in any way except skipping (0 = nothing to do)."""
        return (self.delivered + self.acknowledged + self.deferred + self.dead + self.recovered
                + self.held)

    def summary(self) -> str:
        """One line for the end of a run, e.g. ``notify: delivered 3, acknowledged without
        delivery 0, retried 1, dead-lettered 0``."""
        return (
            f"notify: delivered {self.delivered}, acknowledged without delivery "
            f"{self.acknowledged}, retried {self.deferred}, dead-lettered {self.dead}"
        )


BACKOFF_HINT = "--backoff must be comma-separated seconds, e.g. 5,30,300,3600"


def parse_backoff(text: str) -> RetryPolicy:
    """Parse a retry ladder like ``"5,30,300,3600"`` (seconds) into a :class:`RetryPolicy`.

    Raises:
        InvalidInput: not comma-separated numbers (:data:`BACKOFF_HINT`), or values the policy
            refuses (steps outside (0, 604800] s, more than 32 steps).
    """
    try:
        steps = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InvalidInput(f"{BACKOFF_HINT}; got {text!r}") from None
    if not steps or any(math.isnan(x) or math.isinf(x) for x in steps):
        raise InvalidInput(f"{BACKOFF_HINT}; got {text!r}")
    return RetryPolicy(steps)


MAX_CONCURRENCY = 256
"""Most deliveries a notifier runs at once (``notify --concurrency``)."""


@dataclass(slots=True)
class _Item:
    """One notification to deliver: a stream entry (``entry_id``) or a claimed retry
    (``retry_member``), with the failed attempts so far."""

    fields: dict[str, str]
    entry_id: str = ""
    attempts: int = 0
    retry_member: str | None = None


def _seq(item: _Item) -> int:
    """The ledger seq of a notification (0 when the entry carries none)."""
    seq = item.fields.get("seq", "")
    return int(seq) if seq.isdigit() else 0


def group_name(tier: str | None) -> str:
    """Consumer group of a review queue: ``notify`` or ``notify.<tier>``."""
    return DEFAULT_GROUP if not tier else f"{DEFAULT_GROUP}.{tier}"


@dataclass(frozen=True, slots=True)
class ConsumeReviews:
    """How a :class:`Notifier` consumes the review streams (its command).

    ``consumer``: consumer name within the group (unique per process); ``actor``: who writes
    ledger rows; ``policy``: retry ladder (full jitter over each gap); ``tier``: deliver only
    entries for this tier (group ``notify.<tier>``), or every entry; ``idle_ms``: pending
    entries idle this long, in milliseconds, are taken over (XAUTOCLAIM); ``lease_ms``:
    visibility timeout of a claimed retry, milliseconds; ``concurrency``: most deliveries at
    once (1-:data:`MAX_CONCURRENCY`, checked by :class:`Notifier`).
    """

    consumer: str
    actor: str
    policy: RetryPolicy
    tier: str | None = None
    idle_ms: int = 60_000
    lease_ms: int = 30_000
    concurrency: int = 1


@dataclass(frozen=True, slots=True)
class NotifyPorts:
    """What a :class:`Notifier` reads and writes.

    ``rel``: reliability Redis access (namespace, shards); ``scheduler``: to re-align a
    payload after a DEAD_LETTERED row (``restore``); ``store``: the audit store
    (``append_event``, ``get``); ``deliver``: ``deliver(fields)`` raises on failure (None =
    acknowledge only: the stream itself is the review queue); ``fanout``: how the disputes
    of one step are delivered when ``concurrency`` > 1 (default ``core.ONE_BY_ONE``: one
    after the other; the composition root gives ``bootstrap.delivery_fanout(concurrency)``,
    helper threads, so that up to ``concurrency`` deliveries wait on the webhook at once).
    """

    rel: ReviewStreams
    scheduler: Scheduler
    store: EventLog
    deliver: Deliver | None
    fanout: Fanout = ONE_BY_ONE


class Notifier:
    """Consumer of the review streams of one namespace.

    Args:
        cmd: how to consume (:class:`ConsumeReviews`).
        ports: the streams, scheduler, ledger and webhook (:class:`NotifyPorts`).
        rng: the jitter's random source (None: a fresh ``random.Random``).

    Per dispute, notifications are delivered in ``seq`` order, one at a time: a step's
    entries are grouped by dispute and each group is one call of ``ports.fanout`` (up to
    ``cmd.concurrency`` groups at once, as many as the fanout runs), stopping at its first
    failure; the rest of that group, and any later notification of a dispute whose earlier
    one waits in the retry set, is held behind it (scheduled just after it, attempts
    unchanged). With a fanout that runs several calls at once, ``deliver`` must be safe to
    call from several threads (``adapters.webhook.WebhookClient`` is). The guarantee holds
    within one notifier per review queue: several processes consuming the same group may
    deliver two notifications of a dispute at once.

    Raises:
        InvalidInput: ``concurrency`` out of range.
    """

    def __init__(self, cmd: ConsumeReviews, ports: NotifyPorts,
                 rng: random.Random | None = None) -> None:
        concurrency, tier = cmd.concurrency, cmd.tier
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise InvalidInput(f"concurrency must be 1-{MAX_CONCURRENCY}, got {concurrency}")
        self.concurrency = concurrency
        self.fanout = ports.fanout
        self.rel, self.scheduler, self.store = ports.rel, ports.scheduler, ports.store
        self.deliver, self.policy, self.tier = ports.deliver, cmd.policy, tier
        self.group = group_name(tier)
        self.consumer, self.actor = cmd.consumer, cmd.actor
        self.idle_ms, self.lease_ms = cmd.idle_ms, cmd.lease_ms
        self.rng = rng or random.Random()
        self._ready = False

    def ensure_groups(self) -> None:
        """Create the consumer group on every shard's stream (from the start; idempotent)."""
        for shard in self.rel.review_shards():
            self.rel.ensure_review_group(shard, self.group)
        self._ready = True

    def run_once(self, count: int = 100, block_ms: int | None = None) -> NotifyReport:
        """Recover idle entries, read new ones, run due retries, on every shard.

        Each step's entries are delivered with up to ``concurrency`` deliveries at once,
        one dispute's notifications in ``seq`` order by one call (see :class:`Notifier`).

        Args:
            count: most entries read per step per shard (1-1000).
            block_ms: block the XREADGROUP up to this many ms when nothing is new (None: no).
        """
        if not self._ready:
            self.ensure_groups()
        report = NotifyReport()
        for shard in self.rel.review_shards():
            self._recover(shard, count, report)
            self._read_new(shard, count, block_ms, report)
            self._run_retries(shard, count, report)
        return report

    # ------------------------------------------------------------------ stream
    def _recover(self, shard: int, count: int, report: NotifyReport) -> None:
        entries = self.rel.review_autoclaim(shard, self.group, self.consumer, self.idle_ms,
                                            count)
        items: list[_Item] = []
        for entry_id, fields in entries:
            if fields is None:  # entry trimmed from the stream while pending
                self.rel.review_ack(shard, self.group, entry_id)
                continue
            report.recovered += 1
            items.append(_Item(fields, entry_id=entry_id))
        self._deliver_all(shard, self._own_tier(shard, items, report), report)

    def _read_new(self, shard: int, count: int, block_ms: int | None,
                  report: NotifyReport) -> None:
        items = [_Item(fields, entry_id=entry_id) for entry_id, fields in
                 self.rel.review_read(shard, self.group, self.consumer, count, block_ms)]
        self._deliver_all(shard, self._own_tier(shard, items, report), report)

    def _own_tier(self, shard: int, items: list[_Item], report: NotifyReport) -> list[_Item]:
        """``items`` of this queue's tier; the others acknowledged and counted skipped."""
        if not self.tier:
            return items
        kept = []
        for item in items:
            if item.fields.get("to_tier") != self.tier:
                self.rel.review_ack(shard, self.group, item.entry_id)
                report.skipped += 1
            else:
                kept.append(item)
        return kept

    # ------------------------------------------------------------------ retries
    def _run_retries(self, shard: int, count: int, report: NotifyReport) -> None:
        items = []
        for member, blob in self.rel.notify_claim_retries(shard, count, self.lease_ms):
            record = json.loads(blob)
            items.append(_Item(cast(dict[str, str], record["fields"]),
                               attempts=int(record["attempts"]), retry_member=member))
        self._deliver_all(shard, items, report)

    # ------------------------------------------------------------------ delivery
    def _deliver_all(self, shard: int, items: list[_Item], report: NotifyReport) -> None:
        """Deliver ``items``: one fanout call per dispute (its entries in ``seq`` order,
        stopping at the first failure), up to ``concurrency`` disputes at once; then, in the
        caller's thread, acknowledge what was delivered, defer the failure and hold the rest
        of its dispute behind it."""
        if not items:
            return
        groups: dict[str, list[_Item]] = {}
        for item in items:
            groups.setdefault(item.fields.get("dispute_id", ""), []).append(item)
        for group in groups.values():
            group.sort(key=_seq)
        waiting = self._waiting_retries(shard, {i.retry_member for i in items})
        runnable: list[list[_Item]] = []
        for dispute, group in groups.items():
            ahead = waiting.get(dispute)
            if ahead is not None and ahead[0] < _seq(group[0]):
                self._hold(shard, group, ahead[1] + 1, report)  # an earlier one waits
            else:
                runnable.append(group)
        if self.deliver is None or self.concurrency == 1 or len(runnable) == 1:
            results = [self._deliver_group(g) for g in runnable]
        else:
            results = list(self.fanout.map(self._deliver_group, runnable))
        for group, (done, error) in zip(runnable, results, strict=True):
            for item in group[:done]:
                self._delivered(shard, item, report)
            if error is None:
                continue
            at = self._failed(shard, group[done], error, report)
            if done + 1 < len(group):
                self._hold(shard, group[done + 1:],
                           self.rel.now_ms() if at is None else at + 1, report)

    def _deliver_group(self, group: list[_Item]) -> tuple[int, str | None]:
        """Deliver one dispute's items in order: (how many were delivered, the error of the
        next one or None). May run on a helper thread of the fanout: no Redis or ledger call
        here."""
        for i, item in enumerate(group):
            error = self._try(item.fields)
            if error is not None:
                return i, error
        return len(group), None

    def _waiting_retries(self, shard: int, claimed: set[str | None]) -> dict[str, tuple[int, int]]:
        """This group's retries waiting on ``shard`` (not claimed by this step): dispute id ->
        (lowest seq waiting, latest retry time, epoch ms)."""
        prefix = f"{self.group}|"
        out: dict[str, tuple[int, int]] = {}
        for member, at_ms in self.rel.notify_retry_waiting(shard):
            if not member.startswith(prefix) or member in claimed:
                continue
            dispute, _, seq = member.removeprefix(prefix).rpartition(":")
            if not seq.isdigit():
                continue
            low, latest = out.get(dispute, (int(seq), at_ms))
            out[dispute] = (min(low, int(seq)), max(latest, at_ms))
        return out

    def _delivered(self, shard: int, item: _Item, report: NotifyReport) -> None:
        if item.retry_member is not None:
            self.rel.notify_retry_done(shard, item.retry_member)
        else:
            self.rel.review_ack(shard, self.group, item.entry_id)
        if self.deliver is None:
            report.acknowledged += 1
        else:
            report.delivered += 1
            self.rel.count_notification(shard, "delivered")  # API /metrics

    def _hold(self, shard: int, items: list[_Item], at_ms: int, report: NotifyReport) -> None:
        """Schedule ``items`` (one dispute's, in order) at ``at_ms`` and after, behind an
        earlier notification of the same dispute that is waiting for a retry: not a failed
        attempt (``attempts`` unchanged)."""
        for n, item in enumerate(items):
            record = {"fields": item.fields, "attempts": item.attempts,
                      "last_error": "held behind an earlier notification of the dispute",
                      "group": self.group}
            self.rel.notify_defer(shard, NotifyRetry(
                self.group, item.entry_id, self._member(item.fields), at_ms + n,
                json.dumps(record)))
            report.held += 1
            log.debug("notify.held", dispute_id=item.fields.get("dispute_id", ""),
                      idempotency_key=item.fields.get("idempotency_key", ""),
                      trace_id=item.fields.get("trace_id", ""),
                      source_hash=item.fields.get("source_hash", ""),
                      match_decision=item.fields.get("match_decision", ""), at_ms=at_ms + n)

    def _try(self, fields: Mapping[str, str]) -> str | None:
        if self.deliver is None:
            return None
        try:
            self.deliver(fields)
        except Exception as exc:
            return str(exc)[:300] or type(exc).__name__
        return None

    def _member(self, fields: Mapping[str, str]) -> str:
        return f"{self.group}|{fields.get('idempotency_key', '')}"

    def _failed(self, shard: int, item: _Item, error: str, report: NotifyReport) -> int | None:
        """Count a failed attempt; schedule the retry (returns its time, epoch ms) or
        dead-letter the notification (returns None)."""
        fields, entry_id, attempts = item.fields, item.entry_id, item.attempts + 1
        member = self._member(fields)
        self.rel.count_notification(shard, "failed")  # failed attempts, API /metrics
        record = {"fields": fields, "attempts": attempts, "last_error": error,
                  "group": self.group}
        why = {"dispute_id": fields.get("dispute_id", ""),
               "idempotency_key": fields.get("idempotency_key", ""),
               "trace_id": fields.get("trace_id", ""), "source_hash": fields.get("source_hash", ""),
               "match_decision": fields.get("match_decision", ""), "group": self.group,
               "attempts": attempts, "reason": error}
        if self.policy.exhausted(attempts):
            log.error("notify.delivery_failed", outcome="dead_lettered", **why)
            self._dead(shard, entry_id, member, record)
            report.dead += 1
            return None
        delay_ms = self.policy.next_delay_ms(attempts, self.rng)
        log.warning("notify.delivery_failed", outcome="retry", retry_in_ms=delay_ms, **why)
        at = self.rel.now_ms() + delay_ms
        self.rel.notify_defer(shard, NotifyRetry(self.group, entry_id, member, at,
                                                 json.dumps(record)))
        report.deferred += 1
        return at

    def _dead(self, shard: int, entry_id: str, member: str, record: dict[str, Any]) -> None:
        fields = cast(dict[str, str], record["fields"])
        dead_record = {"kind": "notify", "dispute_id": fields.get("dispute_id", ""),
                       "reason": record["last_error"], "attempts": record["attempts"],
                       "group": self.group, "retry_member": member, "fields": fields}
        dead_ms = self.rel.dead_letter_notify(shard, member, json.dumps(dead_record))
        if entry_id:
            self.rel.review_ack(shard, self.group, entry_id)
        ledger_dead_letter(DeadLetterRow(
            fields.get("dispute_id", ""), self.actor, dead_ms, "NOTIFICATION_DEAD_LETTERED",
            {"kind": "notify", "idempotency_key": fields.get("idempotency_key", ""),
             "attempts": int(record["attempts"]), "group": self.group,
             "last_error": str(record["last_error"])[:200]}), self.store, self.scheduler)


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    """The DEAD_LETTERED ledger row of :func:`ledger_dead_letter`.

    ``dispute_id``: the dispute's id as Redis held it (text; not a UUID: nothing written);
    ``actor``: who writes the row; ``at_ms``: when it was dead-lettered, epoch ms (Redis
    time); ``match_decision``: ``DECISION_DEAD_LETTERED`` or ``NOTIFICATION_DEAD_LETTERED``;
    ``details``: the row's details.
    """

    dispute_id: str
    actor: str
    at_ms: int
    match_decision: str
    details: dict[str, Any]


def ledger_dead_letter(row: DeadLetterRow, store: Any, scheduler: Scheduler, *,
                       realign: bool = True) -> bool:
    """Append a DEAD_LETTERED row on the dispute's chain; with ``realign``, then bring the
    Redis payload to the new seq (``scheduler.restore``; a poison escalation is not realigned,
    since restore would put it back into the pending ZSET).

    Returns False (nothing written) when ``dispute_id`` is not a UUID known to PostgreSQL.
    See the module docstring for the sequence-number semantics.
    """
    try:
        uid = parse_dispute_id(row.dispute_id)
        state = store.append_event(LedgerEvent(
            uid, "DEAD_LETTERED", row.match_decision, row.actor, from_ms(row.at_ms), {},
            row.details))
    except DatabaseReadOnly:
        raise  # not recorded: the caller retries once the database takes writes again
    except EscalationError:
        return False
    if realign:
        scheduler.restore([state])
    return True
