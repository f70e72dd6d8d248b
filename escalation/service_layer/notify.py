"""Use case: deliver review-queue notifications, with retries and a dead-letter set.

A promotion's notification is XADDed to the shard's review STREAM by apply.lua in the same
script that applies the decision. This module is the consumer side:

- one consumer group per review queue: ``notify`` (every tier) or ``notify.<tier>`` (only
  entries whose ``to_tier`` is that tier; other entries are acknowledged and skipped);
- ``XREADGROUP`` new entries; deliver each to the optional webhook (``Idempotency-Key`` =
  ``<dispute id>:<seq>``); ``XACK`` on success;
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
from typing import Any, cast

import structlog

from escalation.domain.errors import DatabaseReadOnly, EscalationError, InvalidInput
from escalation.domain.escalation import parse_dispute_id
from escalation.domain.retry import RetryPolicy
from escalation.domain.timeutil import from_ms
from escalation.ports import EventLog, ReviewStreams, Scheduler

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
    taken over from a crashed consumer (also counted in one of the above).
    """

    delivered: int = 0
    deferred: int = 0
    dead: int = 0
    skipped: int = 0
    recovered: int = 0
    acknowledged: int = 0

    def add(self, other: NotifyReport) -> None:
        """Add ``other``'s counts to this report (in place)."""
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def handled(self) -> int:
        """Entries handled in any way except skipping (0 = nothing to do)."""
        return self.delivered + self.acknowledged + self.deferred + self.dead + self.recovered

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


def group_name(tier: str | None) -> str:
    """Consumer group of a review queue: ``notify`` or ``notify.<tier>``."""
    return DEFAULT_GROUP if not tier else f"{DEFAULT_GROUP}.{tier}"


class Notifier:
    """Consumer of the review streams of one namespace.

    Args:
        rel: reliability Redis access (namespace, shards).
        scheduler: to re-align a payload after a DEAD_LETTERED row (``restore``).
        store: the audit store (``append_event``, ``get``).
        deliver: ``deliver(fields)`` raises on failure (None = acknowledge only: the stream
            itself is the review queue).
        policy: retry ladder (full jitter over each gap).
        tier: deliver only entries for this tier (group ``notify.<tier>``), or every entry.
        consumer: consumer name within the group (unique per process).
        actor: who writes ledger rows.
        idle_ms: pending entries idle this long are taken over (XAUTOCLAIM).
        lease_ms: visibility timeout of a claimed retry.
    """

    def __init__(
        self, *, rel: ReviewStreams, scheduler: Scheduler, store: EventLog,
        deliver: Deliver | None, policy: RetryPolicy, consumer: str, actor: str,
        tier: str | None = None, idle_ms: int = 60_000, lease_ms: int = 30_000,
        rng: random.Random | None = None,
    ) -> None:
        self.rel, self.scheduler, self.store = rel, scheduler, store
        self.deliver, self.policy, self.tier = deliver, policy, tier
        self.group = group_name(tier)
        self.consumer, self.actor = consumer, actor
        self.idle_ms, self.lease_ms = idle_ms, lease_ms
        self.rng = rng or random.Random()
        self._ready = False

    def ensure_groups(self) -> None:
        """Create the consumer group on every shard's stream (from the start; idempotent)."""
        for shard in self.rel.review_shards():
            self.rel.ensure_review_group(shard, self.group)
        self._ready = True

    def run_once(self, count: int = 100, block_ms: int | None = None) -> NotifyReport:
        """Recover idle entries, read new ones, run due retries, on every shard.

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
        for entry_id, fields in entries:
            if fields is None:  # entry trimmed from the stream while pending
                self.rel.review_ack(shard, self.group, entry_id)
                continue
            report.recovered += 1
            self._handle_entry(shard, entry_id, fields, report)

    def _read_new(self, shard: int, count: int, block_ms: int | None,
                  report: NotifyReport) -> None:
        for entry_id, fields in self.rel.review_read(shard, self.group, self.consumer, count,
                                                     block_ms):
            self._handle_entry(shard, entry_id, fields, report)

    def _handle_entry(self, shard: int, entry_id: str, fields: dict[str, str],
                      report: NotifyReport) -> None:
        if self.tier and fields.get("to_tier") != self.tier:
            self.rel.review_ack(shard, self.group, entry_id)
            report.skipped += 1
            return
        error = self._try(fields)
        if error is None:
            self.rel.review_ack(shard, self.group, entry_id)
            if self.deliver is None:
                report.acknowledged += 1
            else:
                report.delivered += 1
                self.rel.count_notification(shard, "delivered")  # API /metrics
            return
        self._failed(shard, entry_id, fields, 1, error, report)

    # ------------------------------------------------------------------ retries
    def _run_retries(self, shard: int, count: int, report: NotifyReport) -> None:
        for member, blob in self.rel.notify_claim_retries(shard, count, self.lease_ms):
            record = json.loads(blob)
            fields = cast(dict[str, str], record["fields"])
            error = self._try(fields)
            if error is None:
                self.rel.notify_retry_done(shard, member)
                if self.deliver is None:
                    report.acknowledged += 1
                else:
                    report.delivered += 1
                    self.rel.count_notification(shard, "delivered")  # API /metrics
                continue
            self._failed(shard, "", fields, int(record["attempts"]) + 1, error, report)

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

    def _failed(self, shard: int, entry_id: str, fields: dict[str, str], attempts: int,
                error: str, report: NotifyReport) -> None:
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
            return
        delay_ms = self.policy.next_delay_ms(attempts, self.rng)
        log.warning("notify.delivery_failed", outcome="retry", retry_in_ms=delay_ms, **why)
        at = self.rel.now_ms() + delay_ms
        self.rel.notify_defer(shard, self.group, entry_id, member, at, json.dumps(record))
        report.deferred += 1

    def _dead(self, shard: int, entry_id: str, member: str, record: dict[str, Any]) -> None:
        fields = cast(dict[str, str], record["fields"])
        dead_record = {"kind": "notify", "dispute_id": fields.get("dispute_id", ""),
                       "reason": record["last_error"], "attempts": record["attempts"],
                       "group": self.group, "retry_member": member, "fields": fields}
        dead_ms = self.rel.dead_letter_notify(shard, member, json.dumps(dead_record))
        if entry_id:
            self.rel.review_ack(shard, self.group, entry_id)
        ledger_dead_letter(self.store, self.scheduler, fields.get("dispute_id", ""),
                           self.actor, dead_ms, "NOTIFICATION_DEAD_LETTERED",
                           {"kind": "notify", "idempotency_key": fields.get("idempotency_key", ""),
                            "attempts": int(record["attempts"]), "group": self.group,
                            "last_error": str(record["last_error"])[:200]})


def ledger_dead_letter(store: Any, scheduler: Scheduler, dispute_id: str, actor: str,
                       at_ms: int, match_decision: str, details: dict[str, Any], *,
                       realign: bool = True) -> bool:
    """Append a DEAD_LETTERED row on the dispute's chain; with ``realign``, then bring the
    Redis payload to the new seq (``scheduler.restore``; a poison escalation is not realigned,
    since restore would put it back into the pending ZSET).

    Returns False (nothing written) when ``dispute_id`` is not a UUID known to PostgreSQL.
    See the module docstring for the sequence-number semantics.
    """
    try:
        uid = parse_dispute_id(dispute_id)
        state = store.append_event(uid, "DEAD_LETTERED", match_decision, actor, from_ms(at_ms),
                                   {}, details)
    except DatabaseReadOnly:
        raise  # not recorded: the caller retries once the database takes writes again
    except EscalationError:
        return False
    if realign:
        scheduler.restore([state])
    return True
