"""Use case: fire due escalations -- one batch of claim -> decide -> record -> apply.

The firing protocol (docs/architecture.md):
1. claim (one Lua call, Redis TIME is the clock, locks with fencing tokens, re-scores each
   claimed member to now + lease so a crashed worker's member comes due again by itself);
2. decide (pure, against the escalation's *pinned* ladder version);
3. record (one PostgreSQL transaction for the whole batch = the commit point);
4. apply (one Lua call; seq + token guarded, so repeats and stale workers have no effect).
Audit before apply, never the reverse.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from escalation.domain.decide import Decision, DecisionKind, decide
from escalation.domain.errors import DatabaseReadOnly, ErrorCode, EscalationError, code_of
from escalation.domain.escalation import Escalation, Status
from escalation.domain.ladder import Ladder
from escalation.domain.timeutil import to_ms
from escalation.ports import (
    MAX_OP_WARNINGS,
    ApplyAction,
    ApplyOp,
    ApplyOutcome,
    AuditLog,
    ClaimedItem,
    ClaimResult,
    LedgerRow,
    RecordOutcome,
    RecordStatus,
    Scheduler,
    WarningMember,
)
from escalation.service_layer.core import CorePorts

EventSink = Callable[..., None]


@dataclass
class BatchReport:
    """What one :func:`fire_due` call did (counts by outcome, plus per-decision details)."""

    now: datetime | None = None
    claimed: int = 0
    recorded: int = 0
    applied: int = 0
    stale: int = 0
    not_owner: int = 0
    stuck: int = 0
    poison: int = 0
    contended: int = 0
    lease_expired: int = 0  # claimed again after a lease lapsed (score > due)
    next_due_ms: int | None = None
    decisions: dict[str, int] = field(default_factory=dict)
    lags_ms: list[int] = field(default_factory=list)
    """Claim lag (Redis TIME at claim - due, ms) of each recorded decision of the batch."""
    ahead: list[str] = field(default_factory=list)
    """Dispute ids claimed with a payload seq above the ledger's: Redis is ahead of the
    ledger (a restore to an earlier point, a failover that lost commits; ADR 0014). Nothing
    was recorded for them; the worker stops firing the namespace."""


def _status_action(status: Status) -> ApplyAction:
    if status is Status.PENDING:
        return ApplyAction.RESCHEDULE
    if status is Status.PAUSED:
        return ApplyAction.PARK
    return ApplyAction.REMOVE


def _notification(item: ClaimedItem, decision: Decision, state: Escalation) -> dict[str, str]:
    """Review-stream entry for the next tier's queue (idempotency key = dispute:seq)."""
    dispute_id, seq = str(state.dispute_id), str(state.seq)  # UUID.__str__ once (profile)
    return {
        "dispute_id": dispute_id,
        "seq": seq,
        "idempotency_key": f"{dispute_id}:{seq}",
        "kind": decision.kind.name,  # the ledger event: PROMOTED / TERMINAL
        "match_decision": decision.match_decision,
        "from_tier": decision.from_tier,
        "to_tier": decision.to_tier or "",
        "ladder": state.ladder_key,
        "trace_id": state.trace_id,
        "source_hash": state.source_hash,
        "external_id": state.external_id or "",
        "source": state.source or "",
        "materiality": str(state.materiality),
        "decided_ms": str(to_ms(decision.decided_at)),
    }


@dataclass(frozen=True, slots=True)
class FireDue:
    """Fire one batch of due escalations (the command of :func:`fire_due`).

    ``batch_size``: members claimed at most, across the shards (1-500); ``lease_ms``: how
    long a claimed member stays locked to this worker, in milliseconds (its visibility
    timeout: due again by itself when the worker dies); ``worker_id``: who acts, on the
    ledger rows and in the locks. ``decision_events=False`` (the worker at any level above
    DEBUG) skips building the per-decision DEBUG events (promoted / terminal / stale_claim)
    altogether: their fields are never formatted on the firing path; warnings (unknown
    member) are always emitted. Nothing here is validated again: the settings bound them.
    """

    batch_size: int
    lease_ms: int
    worker_id: str
    decision_events: bool = True


@dataclass(frozen=True, slots=True)
class FiringHooks:
    """What a caller observes of a batch, and the pre-breach warnings' scheduling.

    ``emit(event, **fields)`` receives one structured event per decision
    (``escalation.promoted`` / ``escalation.terminal`` / ``escalation.stale`` / ...), with the
    seed's ``trace_id``, ``source_hash`` and ``match_decision``. ``crashpoint(name)`` is a test
    hook called at each protocol boundary (``after_claim``, ``after_record``, ``after_apply``).
    ``on_poison(item, code, error)`` is called for a claimed member whose decision failed
    (poison input, e.g. a missing ladder version) with the error's code (the hook acts on
    it) and its message (kept for people); it counts attempts and dead-letters the member
    after a bounded number (docs/reliability.md). Without it the member stays leased, due
    again later.
    ``on_scheduled(escalations)`` receives the escalations that entered a new tier (applied
    RESCHEDULE ops with a notification) to schedule their pre-breach warnings. With
    ``warning_members(escalations) -> members`` as well, those warnings travel inside the
    apply call instead (``ApplyOp.warnings``: the apply script adds them for the ops it
    applies, no round trip of their own); only an escalation with more than
    ``MAX_OP_WARNINGS`` warnings still goes to ``on_scheduled``.
    """

    emit: EventSink | None = None
    crashpoint: Callable[[str], None] | None = None
    on_poison: Callable[[ClaimedItem, ErrorCode, str], object] | None = None
    on_scheduled: Callable[[list[Escalation]], object] | None = None
    warning_members: Callable[[Sequence[Escalation]], list[WarningMember]] | None = None


NO_HOOKS = FiringHooks()
"""A batch nobody observes (events dropped, no poison counting, no warnings)."""


def fire_due(cmd: FireDue, ports: CorePorts, hooks: FiringHooks = NO_HOOKS) -> BatchReport:
    """Fire one batch: claim -> decide -> record -> apply. Returns a :class:`BatchReport`.

    ``ports``: the scheduler claims and applies, the store records, the ladders and
    calendars decide; ``hooks``: see :class:`FiringHooks`.

    Raises:
        Database or Redis connection errors propagate (the caller backs off); claimed members
        then come due again when their lease ends.
        DatabaseReadOnly: the ledger refused the batch's decisions (a hot standby, a
            failover's read-only window): nothing was recorded, and every claimed member was
            handed back first (due again at once, lock released), so none waits its lease.
    """
    scheduler, store, worker_id = ports.scheduler, ports.store, cmd.worker_id
    emit, crashpoint = hooks.emit, hooks.crashpoint
    on_scheduled, warning_members = hooks.on_scheduled, hooks.warning_members
    sink: EventSink = emit or (lambda event, **kw: None)
    hook = crashpoint or (lambda name: None)
    report = BatchReport()
    claim = scheduler.claim(cmd.batch_size, cmd.lease_ms, worker_id)
    report.now, report.claimed = claim.now, len(claim.items)
    report.contended, report.next_due_ms = claim.contended, claim.next_due_ms
    # a member re-scored to claim time + lease still carries that score when claimed again
    report.lease_expired = sum(1 for it in claim.items if it.score_ms > to_ms(it.escalation.due_at))
    hook("after_claim")

    if claim.stuck:  # rare: a member without payload
        _repair_stuck(claim.stuck, ports, worker_id, claim.now, sink)
        report.stuck += len(claim.stuck)
    if not claim.items:
        return report

    ops: list[ApplyOp] = []
    decided = _decide_all(claim, ports, ops, report, hooks)
    hook("before_record")
    try:
        outcomes: list[RecordOutcome] = (store.record_decisions(decided, worker_id)
                                         if decided else [])
    except DatabaseReadOnly:
        _hand_back(claim.items, scheduler)
        raise
    hook("after_record")
    logs, stale_ops = _ops_from_outcomes(decided, outcomes, ops, report,
                                         events=cmd.decision_events)
    if stale_ops:
        _attach_unapplied_notifications(ops, stale_ops, claim.items, store)
    folded = _attach_warnings(ops, warning_members) if warning_members is not None else None
    results = scheduler.apply(ops) if ops else []
    hook("after_apply")
    _count_results(results, report)
    if on_scheduled is not None:  # pre-breach warnings of the newly entered tiers
        entered = [op.escalation for op, res in zip(ops, results, strict=True)
                   if res is ApplyOutcome.APPLIED and op.notify
                   and op.action is ApplyAction.RESCHEDULE]
        if folded is not None:  # scheduled by the apply call, but for the rare overflow
            entered = [e for e in entered if e.dispute_id not in folded]
        if entered or folded is None:
            on_scheduled(entered)
    # Host clock (epoch ms) right after the apply call: apply lag = applied_ms - due (bench).
    applied_ms = time.time_ns() // 1_000_000
    for event, fields in logs:  # per decision: DEBUG (the ledger is the record)
        sink(event, worker_id=worker_id, applied_ms=applied_ms,
             level="warning" if event == "escalation.unknown_member" else "debug", **fields)
    sink("worker.batch", **batch_summary(report), worker_id=worker_id, level="info")
    return report


def batch_summary(report: BatchReport) -> dict[str, Any]:
    """The fields of the one INFO ``worker.batch`` line per non-empty batch.

    ``decisions``: count per match_decision (one per target tier, e.g. PROMOTED_TO_SENIOR);
    ``lag_ms_p50`` / ``lag_ms_max``: claim lag of the recorded decisions (None if none).
    """
    lags = sorted(report.lags_ms)
    return {
        "claimed": report.claimed, "recorded": report.recorded, "applied": report.applied,
        "stale": report.stale, "poison": report.poison, "stuck": report.stuck,
        "decisions": dict(sorted(report.decisions.items())),
        "lag_ms_p50": lags[len(lags) // 2] if lags else None,
        "lag_ms_max": lags[-1] if lags else None,
    }


def _hand_back(items: Sequence[ClaimedItem], scheduler: Scheduler) -> None:
    """Give claimed members back without a decision: a reschedule at their own seq under
    their fencing token puts each back at its payload's due time and releases its lock
    (apply.lua, "stale_seq" of the owner); a member another worker took meanwhile is left
    alone (``not_owner``)."""
    scheduler.apply([ApplyOp(item.escalation, ApplyAction.RESCHEDULE, item.token)
                     for item in items])


def _decide_all(
    claim: ClaimResult, ports: CorePorts, ops: list[ApplyOp], report: BatchReport,
    hooks: FiringHooks,
) -> list[tuple[ClaimedItem, Decision]]:
    """Decide each claimed item at the claim's instant (step 2). NOT_DUE items get a
    RESCHEDULE op appended to ``ops``; poison items are reported (``report.poison``,
    ``hooks.emit``, ``hooks.on_poison``); the rest are returned, in claim order, for the
    record step."""
    items, now, on_poison = claim.items, claim.now, hooks.on_poison
    sink: EventSink = hooks.emit or (lambda event, **kw: None)
    decided: list[tuple[ClaimedItem, Decision]] = []
    seen: dict[tuple[str, int], Ladder] = {}  # a batch shares a few pinned ladder versions
    ladders, calendars = ports.ladders, ports.calendars
    for item in items:
        esc = item.escalation
        try:
            ladder = seen.get((esc.ladder, esc.ladder_version))
            if ladder is None:
                ladder = seen[(esc.ladder, esc.ladder_version)] = ladders.get(
                    esc.ladder, esc.ladder_version)
            decision = decide(esc, ladder, now, calendars)
        except (EscalationError, OverflowError, ValueError) as exc:
            # a rule that cannot be computed for this escalation (e.g. a due time past year
            # 9999) is poison for this one item: dead-lettered after bounded attempts, never a
            # crash of the worker and of the other escalations claimed with it
            report.poison += 1
            sink("escalation.decision_failed", dispute_id=str(esc.dispute_id),
                 trace_id=esc.trace_id, source_hash=esc.source_hash,
                 match_decision="DECISION_FAILED", error=str(exc), level="error")
            # bounded attempts -> dead letter (service_layer/dead_letters.py)
            if on_poison is not None:
                on_poison(item, code_of(exc), str(exc))
            continue
        if decision.kind is DecisionKind.NOT_DUE:
            ops.append(ApplyOp(esc.with_changes(seq=esc.seq), ApplyAction.RESCHEDULE, item.token))
            continue
        decided.append((item, decision))
    return decided


def _ops_from_outcomes(
    decided: list[tuple[ClaimedItem, Decision]], outcomes: list[RecordOutcome],
    ops: list[ApplyOp], report: BatchReport, *, events: bool = True,
) -> tuple[list[tuple[str, dict[str, Any]]], list[int]]:
    """Turn record outcomes into apply ops (appended to ``ops``) and log events (the DEBUG
    ones only when ``events``).

    Returns:
        (events to emit after apply, indexes into ``ops`` of the STALE/CLOSED ops).
    """
    logs: list[tuple[str, dict[str, Any]]] = []
    stale_ops: list[int] = []
    now_ms = to_ms(report.now) if report.now is not None else 0
    for (item, decision), outcome in zip(decided, outcomes, strict=True):
        esc = item.escalation
        if outcome.status is RecordStatus.RECORDED and outcome.state is not None:
            state = outcome.state
            report.recorded += 1
            report.decisions[decision.match_decision] = (
                report.decisions.get(decision.match_decision, 0) + 1
            )
            report.lags_ms.append(now_ms - to_ms(esc.due_at))
            terminal = decision.kind is DecisionKind.TERMINAL
            action = ApplyAction.REMOVE if terminal else ApplyAction.RESCHEDULE
            note = _notification(item, decision, state)  # same dispute as esc
            ops.append(ApplyOp(state, action, item.token, note))
            if not events:
                continue
            logs.append(("escalation.terminal" if terminal else "escalation.promoted", {
                "dispute_id": note["dispute_id"], "trace_id": esc.trace_id,
                "source_hash": esc.source_hash, "match_decision": decision.match_decision,
                "from_tier": decision.from_tier, "to_tier": decision.to_tier,
                "ladder": esc.ladder_key, "seq": state.seq, "fence_token": item.token,
                "lag_ms": report.lags_ms[-1],
                "next_due_at": state.due_at.isoformat() if decision.to_tier else None,
            }))
        elif outcome.status is RecordStatus.UNKNOWN:
            ops.append(ApplyOp(esc.with_changes(seq=esc.seq + 1), ApplyAction.REMOVE, item.token))
            logs.append(("escalation.unknown_member", {
                "dispute_id": str(esc.dispute_id), "trace_id": esc.trace_id,
                "source_hash": esc.source_hash, "match_decision": "ZSET_DRIFT"}))
        elif outcome.state is not None:
            # STALE or CLOSED: PostgreSQL already holds a newer decision; apply that state
            # (with the notification of a decision that was recorded but never applied).
            report.stale += 1
            state = outcome.state
            if state.seq < esc.seq:  # the ledger is behind what Redis applied: ADR 0014
                report.ahead.append(str(esc.dispute_id))
            stale_ops.append(len(ops))
            ops.append(ApplyOp(state, _status_action(state.status), item.token))
            if not events:
                continue
            logs.append(("escalation.stale_claim", {
                "dispute_id": str(esc.dispute_id), "trace_id": esc.trace_id,
                "source_hash": esc.source_hash, "match_decision": "ALREADY_DECIDED",
                "claimed_seq": esc.seq, "recorded_seq": state.seq}))
    return logs, stale_ops


def _attach_warnings(
    ops: list[ApplyOp],
    members_of: Callable[[Sequence[Escalation]], list[WarningMember]],
) -> set[UUID]:
    """Put the pre-breach warnings of each op entering a new tier (RESCHEDULE with a
    notification: the ops ``on_scheduled`` would be called with once applied) into the op
    (``ApplyOp.warnings``), so the apply call schedules them for the ops it applies.

    Returns:
        the dispute ids whose warnings travel with their op (all of them but those with
        more than ``MAX_OP_WARNINGS`` warnings, which the caller schedules itself).
    """
    idx = [i for i, op in enumerate(ops) if op.notify and op.action is ApplyAction.RESCHEDULE]
    if not idx:
        return set()
    by_id: dict[UUID, list[WarningMember]] = {}
    for m in members_of([ops[i].escalation for i in idx]):
        by_id.setdefault(m.dispute_id, []).append(m)
    folded: set[UUID] = set()
    for i in idx:
        op = ops[i]
        did = op.escalation.dispute_id
        mine = by_id.get(did, [])
        if len(mine) > MAX_OP_WARNINGS:
            continue
        folded.add(did)
        if mine:
            ops[i] = ApplyOp(op.escalation, op.action, op.token, op.notify, tuple(mine))
    return folded


def _count_results(results: list[ApplyOutcome], report: BatchReport) -> None:
    for result in results:
        if result is ApplyOutcome.APPLIED:
            report.applied += 1
        elif result is ApplyOutcome.NOT_OWNER:
            report.not_owner += 1


def _attach_unapplied_notifications(
    ops: list[ApplyOp], stale_ops: list[int], items: list[ClaimedItem], store: AuditLog
) -> None:
    """Give a stale op the notification of a decision recorded but never applied.

    The claimed payload's seq is the last one applied in Redis; a PROMOTED/TERMINAL ledger
    row after it (e.g. a worker killed between record and apply) never reached the review
    stream. The apply script sends it at most once: it is seq-guarded.
    """
    claimed_seq = {i.escalation.dispute_id: i.escalation.seq for i in items}
    ranges = [(ops[i].escalation.dispute_id, claimed_seq[ops[i].escalation.dispute_id],
               ops[i].escalation.seq) for i in stale_ops
              if ops[i].escalation.dispute_id in claimed_seq]
    notes = unapplied_notifications(store, ranges)
    for i in stale_ops:
        op = ops[i]
        note = notes.get(op.escalation.dispute_id)
        if note is not None:
            ops[i] = ApplyOp(op.escalation, op.action, op.token, note)


def notification_of_row(row: LedgerRow) -> dict[str, str]:
    """The review-stream entry of a recorded PROMOTED/TERMINAL ledger row (the same fields
    the worker's apply sends; idempotency key ``<dispute>:<seq>``)."""
    return {
        "dispute_id": str(row.dispute_id), "seq": str(row.seq),
        "idempotency_key": f"{row.dispute_id}:{row.seq}", "kind": row.event,
        "match_decision": row.match_decision, "from_tier": row.from_tier or "",
        "to_tier": row.to_tier or "", "ladder": f"{row.ladder}@{row.ladder_version}",
        "trace_id": row.trace_id, "source_hash": row.source_hash,
        "external_id": row.external_id or "", "source": row.source or "",
        "materiality": str(row.materiality), "decided_ms": str(to_ms(row.decided_at)),
    }


class UnappliedSource(Protocol):
    """The audit-store query :func:`unapplied_notifications` needs."""

    def unapplied_decisions(
        self, ranges: Sequence[tuple[UUID, int, int]]
    ) -> dict[UUID, LedgerRow]:
        """Latest PROMOTED/TERMINAL row with after < seq <= upto per (dispute, after, upto)."""
        ...


def unapplied_notifications(
    store: UnappliedSource, ranges: Sequence[tuple[UUID, int, int]]
) -> dict[UUID, dict[str, str]]:
    """Entries of decisions recorded but maybe never applied, by dispute id.

    Args:
        ranges: (dispute id, seq of the Redis payload = last applied, recorded seq) triples.

    Returns:
        for each dispute with a PROMOTED/TERMINAL row in ``(applied, recorded]``, that row's
        entry; whoever applies next sends it, at most once (apply.lua / cancel.lua guard it
        by its seq).
    """
    todo = [r for r in ranges if r[1] < r[2]]
    if not todo:
        return {}
    return {did: notification_of_row(row)
            for did, row in store.unapplied_decisions(todo).items()}


class NotifiedSource(Protocol):
    """The review-stream read :func:`lost_notifications` needs (``Scheduler.notified`` for
    the worker, ``SchedulerInspection.notified`` for reconcile: the same stream read)."""

    def notified(self, wanted: Mapping[str, tuple[str, int]], count: int = 1000) -> set[str]:
        """The idempotency keys among ``wanted`` (dispute id -> (key, decided epoch ms))
        that already have an entry in their shard's review stream."""
        ...


def lost_notifications(store: UnappliedSource, stream: NotifiedSource,
                       missing: Sequence[tuple[UUID, int, int]]) -> dict[UUID, dict[str, str]]:
    """Review-stream entries to send with the re-creation of MISSING payloads, by dispute id.

    The one rule of both repairs of a payload gone from Redis -- reconcile (MISSING) and the
    worker's STUCK_MEMBER repair: a payload lost (a failover to a replica that never had it,
    or had nothing: promoted mid full resync, or resynced from its crashed primary restarted
    empty) may have taken the stream entries written after it with it. The latest
    PROMOTED/TERMINAL decision of each is looked up and sent with the repair unless its
    idempotency key is still in the stream (a payload deleted on its own): one entry per
    decision either way. Whichever repair re-creates the payload first sends it (apply.lua's
    restore mode writes the entry only when it creates the payload); the other finds the
    payload and sends nothing (its own entry, if any, is refused by the notify seq guard).

    Args:
        missing: (dispute id, 0, recorded seq) per payload to re-create.

    Returns:
        dispute id -> entry, for the escalations with a decision whose entry is not in the
        stream.
    """
    notes = unapplied_notifications(store, missing)
    if not notes:
        return {}
    present = stream.notified({str(did): (n["idempotency_key"], int(n["decided_ms"]))
                               for did, n in notes.items()})
    return {did: n for did, n in notes.items() if n["idempotency_key"] not in present}


def _repair_stuck(
    members: Sequence[str], ports: CorePorts, worker_id: str, now: datetime, sink: EventSink,
) -> None:
    """ZSET members without payload (STUCK_MEMBER; claim.lua removed them from the ZSETs):
    record each on its chain, restore the pending ones from PostgreSQL with the entry of
    their latest decision unless the review stream still holds it (:func:`lost_notifications`,
    reconcile's MISSING rule). Runs only when a claim reports stuck members."""
    from escalation.domain.escalation import parse_dispute_id

    scheduler, store = ports.scheduler, ports.store

    found: list[tuple[str, UUID, Escalation | None]] = []
    todo: list[Escalation] = []
    for member in members:
        try:
            dispute_id = parse_dispute_id(member)
        except EscalationError:
            sink("escalation.stuck_member", dispute_id=member, match_decision="STUCK_MEMBER",
                 trace_id="", source_hash="", repaired=False, worker_id=worker_id,
                 level="warning")
            continue
        state = store.record_stuck(dispute_id, worker_id, now)
        found.append((member, dispute_id, state))
        if state is not None:
            got = store.get(dispute_id)
            if got is not None and got[1] is Status.PENDING:
                todo.append(got[0])
    repaired: set[UUID] = set()
    if todo:
        notes = lost_notifications(store, scheduler,
                                   [(e.dispute_id, 0, e.seq) for e in todo])
        scheduler.restore(todo, notes or None)
        repaired = {e.dispute_id for e in todo}
    for member, dispute_id, state in found:
        sink("escalation.stuck_member", dispute_id=member, match_decision="STUCK_MEMBER",
             trace_id=state.trace_id if state else "",
             source_hash=state.source_hash if state else "",
             repaired=dispute_id in repaired, worker_id=worker_id, level="warning")
