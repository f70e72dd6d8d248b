"""Use case: dead letters -- poison escalations and undeliverable notifications.

After a bounded number of attempts an item moves to the dead-letter set for inspection
(docs/reliability.md, "Dead letters"). Two kinds share the dead-letter ZSET (score =
dead-lettered time, epoch ms) and its ``dead_data`` HASH of JSON records:

- ``decision:<dispute id>``: an escalation whose decision failed ``max_attempts`` times in a
  row (poison input: a ladder version missing, an unknown tier). Each failure increments a
  counter (``decision_failures`` HASH); a released ladder file that is missing or was
  edited after release (code ``RELEASE_BROKEN``) dead-letters at the first failure; below the
  bound the member stays leased and comes due again after its lease, so it never blocks
  the rest of the batch; at the bound
  ``dead_letter.lua`` removes it from the pending ZSET -- and from the ready ZSET and prio
  HASH of the materiality priority (ADR 0006; the weight is kept in the record and restored
  by ``retry``) -- while the claim's fencing token still holds the lock. The payload stays
  (for ``retry``); reconcile skips dead-lettered ids. A
  ``DEAD_LETTERED`` ledger row records it (the projection stays *pending*: PostgreSQL still
  owes the escalation; the Redis payload is deliberately left at its older seq, and a later
  ``retry`` re-claims it, sees STALE, applies the recorded state and decides again).
- ``notify:<group>|<dispute id>:<seq>``: see :mod:`escalation.service_layer.notify`.

``purge`` removes a dead letter for good and leaves a ``PURGED`` ledger row; purging a
poison escalation also cancels it (status ``cancelled``, payload deleted) so reconcile does not
bring it back.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from escalation.domain.errors import (
    DatabaseReadOnly,
    ErrorCode,
    EscalationError,
    InvalidInput,
    NotFound,
)
from escalation.domain.escalation import Status, check_reason, parse_dispute_id
from escalation.domain.timeutil import from_ms
from escalation.ports import (
    DEAD_DECISION,
    DEAD_NOTIFY,
    ClaimedItem,
    EventLog,
    LedgerEvent,
    Scheduler,
)
from escalation.service_layer.notify import DeadLetterRow, ledger_dead_letter


class DeadLetterQueue(Protocol):
    """The dead-letter set and its scripts (adapter:
    ``adapters.redis_reconcile_notify.ReliabilityRedis``; see ``service_layer.dead_letters``)."""

    def now_ms(self) -> int:
        """Redis TIME, epoch milliseconds."""
        ...

    def count_decision_failure(self, dispute_id: str) -> int:
        """Count one more failed decision; returns the count so far."""
        ...

    def dead_letter_decision(self, dispute_id: str, token: int, record_json: str) -> int:
        """Dead-letter a poison escalation under its claim token; dead-lettered time (epoch
        ms), 0 when the token no longer holds the lock."""
        ...

    def dead_list(self, limit: int = 100) -> list[tuple[str, int, dict[str, Any]]]:
        """Dead letters, oldest first: ``(member, dead-lettered ms, record)``."""
        ...

    def dead_get(self, member: str) -> tuple[int, dict[str, Any]] | None:
        """One dead letter's (dead-lettered ms, record), or None."""
        ...

    def retry_dead(self, member: str, kind: str, target: str, record_json: str) -> str:
        """Schedule a dead letter again, due now. Returns the script outcome."""
        ...

    def dead_count(self) -> int:
        """Dead letters over every shard (ZCARD: the dead-letter cap's cheap check)."""
        ...

    def purge_dead(self, member: str, dispute_id: str | None) -> None:
        """Remove a dead letter (and, for a poison escalation, its Redis state)."""
        ...


DEFAULT_MAX_DECISION_ATTEMPTS = 5
MAX_LIST = 10_000
"""The most dead letters one :meth:`DeadLetters.list` call returns."""


class DeadLetters:
    """Dead-letter operations for one namespace.

    Args:
        rel: reliability Redis access.
        scheduler: the scheduler (payload re-alignment).
        store: the audit store (``append_event``).
        actor: who writes ledger rows.
        max_decision_attempts: failed decisions before a member is dead-lettered (>= 1).
    """

    def __init__(self, *, rel: DeadLetterQueue, scheduler: Scheduler, store: EventLog, actor: str,
                 max_decision_attempts: int = DEFAULT_MAX_DECISION_ATTEMPTS) -> None:
        if max_decision_attempts < 1:
            raise InvalidInput("max_decision_attempts must be >= 1")
        self.rel, self.scheduler, self.store, self.actor = rel, scheduler, store, actor
        self.max_decision_attempts = max_decision_attempts

    # ------------------------------------------------------------------ poison decisions
    def on_decision_failed(self, item: ClaimedItem, code: ErrorCode, error: str) -> bool:
        """``fire_due``'s ``on_poison`` hook: count a failed decision; dead-letter at the bound,
        or at once for ``code`` ``RELEASE_BROKEN``. ``error`` (the message) is only recorded.

        Returns:
            True when the member was moved to the dead-letter set now.
        """
        did = str(item.escalation.dispute_id)
        attempts = self.rel.count_decision_failure(did)
        # a broken released ladder file (missing or edited) does not heal by retrying
        if attempts < self.max_decision_attempts and code is not ErrorCode.RELEASE_BROKEN:
            return False
        record = {"kind": "decision", "dispute_id": did, "reason": error[:300],
                  "attempts": attempts, "ladder": item.escalation.ladder_key,
                  "tier": item.escalation.tier, "seq": item.escalation.seq}
        dead_ms = self.rel.dead_letter_decision(did, item.token, json.dumps(record))
        if dead_ms == 0:
            return False  # the lease ended and another worker holds the claim now
        ledger_dead_letter(DeadLetterRow(
            did, self.actor, dead_ms, "DECISION_DEAD_LETTERED",
            {"kind": "decision", "attempts": attempts, "error": error[:200]}),
            self.store, self.scheduler, realign=False)
        return True

    # ------------------------------------------------------------------ admin
    def list(self, limit: int = 100) -> list[dict[str, Any]]:
        """At most ``limit`` (1-10,000) dead letters, oldest first: ``{"member", "dead_ms",
        **record}``.

        Raises:
            InvalidInput: ``limit`` outside 1-10,000 (0 would print an empty list that reads
                as "no dead letters").
        """
        if not 1 <= limit <= MAX_LIST:
            raise InvalidInput(f"limit must be 1-{MAX_LIST:,}, got {limit}")
        return [{"member": m, "dead_ms": ms, **rec} for m, ms, rec in self.rel.dead_list(limit)]

    def show(self, member: str) -> dict[str, Any]:
        """One dead letter. Raises NotFound."""
        got = self.rel.dead_get(member)
        if got is None:
            raise NotFound(f"no dead letter {member!r}")
        return {"member": member, "dead_ms": got[0], **got[1]}

    def retry(self, member: str) -> str:
        """Schedule a dead letter again (due now). Returns the script outcome.

        Raises:
            NotFound: no such dead letter.
        """
        return self._requeue(member, self.show(member))

    def _requeue(self, member: str, item: dict[str, Any]) -> str:
        """The retry script for ``member`` whose record is ``item``: "requeued", "absent"
        (no longer dead-lettered), "no_payload". Raises InvalidInput for an unknown kind."""
        if member.startswith(DEAD_DECISION):
            return self.rel.retry_dead(member, "decision", member[len(DEAD_DECISION):], "")
        if member.startswith(DEAD_NOTIFY):
            record = {"fields": item.get("fields", {}), "attempts": 0,
                      "last_error": "retried by admin", "group": item.get("group", "")}
            return self.rel.retry_dead(member, "notify", member[len(DEAD_NOTIFY):],
                                       json.dumps(record))
        raise InvalidInput(f"unknown dead letter kind: {member!r}")

    def retry_all(self, *, kind: str | None = None, match: str | None = None,
                  limit: int = 1_000_000) -> dict[str, int]:
        """Retry every dead letter (oldest first, at most ``limit``) of ``kind``
        (``"decision"``: poison escalations, ``"notify"``: undeliverable notifications,
        None: both) whose record contains ``match`` (a plain substring of its JSON, e.g. the
        ladder file's name from the reason; None: all). For the aftermath of one cause (a
        broken released ladder file restored, a webhook fixed).

        Returns:
            ``{outcome: count}`` of the retry script's outcomes (``"requeued"`` ...).

        Raises:
            InvalidInput: ``kind`` is not decision, notify or None.
        """
        prefixes = {"decision": (DEAD_DECISION,), "notify": (DEAD_NOTIFY,),
                    None: (DEAD_DECISION, DEAD_NOTIFY)}
        if kind not in prefixes:
            raise InvalidInput(f"kind must be decision or notify, got {kind!r}")
        outcomes: dict[str, int] = {}
        for member, _, record in self.rel.dead_list(limit):  # a snapshot: retries remove
            if not member.startswith(prefixes[kind]):
                continue
            if match is not None and match not in json.dumps(record, ensure_ascii=False):
                continue
            # the record read with the list: no second read per member (the script answers
            # "absent" for one retried or purged meanwhile)
            outcome = self._requeue(member, record)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        return outcomes

    def purge(self, member: str, *, confirm: bool, reason: str) -> bool:
        """Remove a dead letter for good; leave a PURGED ledger row on the dispute's chain.

        A poison escalation is cancelled in PostgreSQL (status ``cancelled``) and its payload
        deleted, so reconcile does not bring it back.

        Returns:
            True if a ledger row was written (False: the dispute is unknown to PostgreSQL).

        Raises:
            InvalidInput: ``confirm`` is False (field ``confirm``: the CLI's ``--yes``, the
                console's confirmation box, each entry point names its own); ``reason``
                blank, over 500 characters or multi-line (the PURGED row's why).
            NotFound: no such dead letter.
        """
        if not confirm:
            raise InvalidInput("purge is permanent and was not confirmed; nothing purged",
                               field="confirm")
        check_reason(reason)
        item = self.show(member)
        did = str(item.get("dispute_id", ""))
        decision = member.startswith(DEAD_DECISION)
        written = False
        try:
            uid = parse_dispute_id(did)
            changes: dict[str, Any] = {"status": Status.CANCELLED} if decision else {}
            self.store.append_event(LedgerEvent(
                uid, "PURGED", "DEAD_LETTER_PURGED", self.actor, from_ms(self.rel.now_ms()),
                changes, {"member": member, "kind": item.get("kind", ""),
                          "reason": reason[:200]}))
            written = True
        except DatabaseReadOnly:
            raise  # nothing recorded: the dead letter stays until the ledger takes the row
        except EscalationError:
            written = False
        self.rel.purge_dead(member, did if decision and did else None)
        return written


CAP_SCAN = 100_000
"""The most dead letters one :func:`cap_dead_letters` run reads (oldest first)."""
DAY_MS = 86_400_000


@dataclass(frozen=True)
class DeadLetterCap:
    """The bounds :func:`cap_dead_letters` enforces.

    Attributes:
        max_count: dead letters kept at most (``ESCALATION_DEAD_LETTER_MAX``, >= 1).
        max_age_days: a dead letter older than this many days is over the cap
            (``ESCALATION_DEAD_LETTER_MAX_AGE_DAYS``, >= 1; age from its dead-lettered
            instant, Redis TIME).
    """

    max_count: int
    max_age_days: int

    def __post_init__(self) -> None:
        if self.max_count < 1:
            raise InvalidInput(f"max_count must be >= 1, got {self.max_count}")
        if self.max_age_days < 1:
            raise InvalidInput(f"max_age_days must be >= 1, got {self.max_age_days}")


@dataclass
class CapReport:
    """What one :func:`cap_dead_letters` run found and did.

    Attributes:
        count: dead letters before the run. decisions: of them, dead-lettered escalations
            (-1: not counted, the run found everything within the cap from a ZCARD and the
            oldest member alone).
        oldest_age_ms: age of the oldest (ms; None when there is none).
        purged: undeliverable notifications purged (member names).
        over_cap: the count or the oldest age is over the cap (before purging) -- the alert.
        kept_decisions_over_cap: dead-lettered escalations over the age cap (never purged:
            the ledger still owes them; they need an operator).
    """

    count: int = 0
    decisions: int = 0
    oldest_age_ms: int | None = None
    purged: list[str] = field(default_factory=list)
    over_cap: bool = False
    kept_decisions_over_cap: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the maintenance job's result)."""
        return {"dead": self.count, "decisions": self.decisions,
                "oldest_age_ms": self.oldest_age_ms, "purged": len(self.purged),
                "over_cap": self.over_cap,
                "kept_decisions_over_cap": self.kept_decisions_over_cap}


def cap_dead_letters(cap: DeadLetterCap, dead: DeadLetters) -> CapReport:
    """Keep the dead letters within ``cap``: the oldest undeliverable notifications older
    than ``cap.max_age_days``, then the oldest beyond ``cap.max_count``, are purged through
    :meth:`DeadLetters.purge` (one PURGED ledger row each, reason naming the cap). A
    dead-lettered escalation is never purged here: the ledger still owes its escalation
    (purging would cancel it); it counts towards the cap and keeps the alert on.

    Returns:
        CapReport (``over_cap``: the alert; the maintenance job logs it as an ERROR).

    Raises:
        Redis / database errors propagate (the maintenance job logs them; the next run
        goes on).
    """
    count = dead.rel.dead_count()
    if not count:
        return CapReport()
    now = dead.rel.now_ms()
    limit_ms = cap.max_age_days * DAY_MS
    oldest = dead.rel.dead_list(1)  # the oldest over every shard (one ZRANGE per shard)
    if count <= cap.max_count and oldest and now - oldest[0][1] <= limit_ms:
        # within the cap: no need to read every record (a ZCARD and one member per shard)
        return CapReport(count=count, decisions=-1, oldest_age_ms=max(0, now - oldest[0][1]))
    rows = dead.rel.dead_list(CAP_SCAN)  # oldest first, every shard
    report = CapReport(count=len(rows),
                       decisions=sum(1 for m, _, _ in rows if m.startswith(DEAD_DECISION)))
    if not rows:
        return report
    report.oldest_age_ms = max(0, now - rows[0][1])
    too_old = [(m, at) for m, at, _ in rows if now - at > limit_ms]
    report.over_cap = len(rows) > cap.max_count or bool(too_old)
    report.kept_decisions_over_cap = sum(1 for m, _ in too_old if m.startswith(DEAD_DECISION))
    left = len(rows)
    for member, at, _ in rows:  # oldest first
        if member.startswith(DEAD_DECISION):
            continue
        old = now - at > limit_ms
        if not old and left <= cap.max_count:
            break
        why = (f"dead-letter cap: older than {cap.max_age_days} day(s)" if old
               else f"dead-letter cap: more than {cap.max_count} dead letters")
        with contextlib.suppress(NotFound):  # purged or retried meanwhile
            dead.purge(member, confirm=True, reason=why)
        report.purged.append(member)
        left -= 1
    return report
