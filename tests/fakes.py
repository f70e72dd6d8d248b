"""In-memory fakes of the ports, for unit tests of the service layer.

Each fake has the behaviour of its adapter (not canned answers): ``FakeScheduler`` follows
the rules of claim.lua / apply.lua / enqueue.lua / cancel.lua on dicts (plain due order, no
shards or ready set), ``FakeAuditLog`` keeps a projection and an append-only ledger and
records decisions with the same domain rule as the PostgreSQL store
(``escalation.domain.record_rule.plan_record``). The integration tests check the adapters
against the real servers; these fakes let the firing and enqueue use cases be tested branch
by branch in milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from escalation.domain.decide import Decision
from escalation.domain.errors import ConflictError, InvalidInput, LadderError, NotFound
from escalation.domain.escalation import Escalation, Status
from escalation.domain.ladder import Ladder
from escalation.domain.record_rule import (
    ProjectionHead,
    RecordRequest,
    check_recordable,
    plan_record,
)
from escalation.domain.timeutil import require_aware, to_ms
from escalation.ports import (
    ApplyAction,
    ApplyOp,
    ApplyOutcome,
    ClaimedItem,
    ClaimResult,
    LedgerRow,
    RecordOutcome,
    RecordStatus,
)


@dataclass
class FakeLock:
    token: int
    worker_id: str
    expires_ms: int


@dataclass
class FakeScheduler:
    """The Scheduler port on dicts. ``now`` is the one clock (move it with :meth:`advance`).

    State: ``scores`` (member -> due epoch ms; the pending ZSET), ``payloads`` (member ->
    Escalation), ``locks`` (member -> FakeLock with its lease end), ``review`` (stream
    entries, oldest first).
    """

    now: datetime
    scores: dict[str, int] = field(default_factory=dict)
    payloads: dict[str, Escalation] = field(default_factory=dict)
    locks: dict[str, FakeLock] = field(default_factory=dict)
    review: list[dict[str, str]] = field(default_factory=list)
    fence: int = 0

    def advance(self, delta: timedelta) -> None:
        """Move the clock forward by ``delta``."""
        self.now += delta

    def time(self) -> datetime:
        return self.now

    def enqueue_many(self, escalations: Sequence[Escalation]) -> list[bool]:
        for esc in escalations:
            if esc.status is not Status.PENDING:
                raise ConflictError(f"cannot enqueue {esc.dispute_id}: status {esc.status}")
            if esc.seq < 0:
                raise InvalidInput(f"seq of {esc.dispute_id} must be >= 0")
        out = []
        for esc in escalations:
            member = str(esc.dispute_id)
            if member in self.payloads:
                out.append(False)
                continue
            self.payloads[member] = esc
            self.scores[member] = to_ms(esc.due_at)
            out.append(True)
        return out

    def _lock_of(self, member: str, now_ms: int) -> FakeLock | None:
        lock = self.locks.get(member)
        if lock is not None and lock.expires_ms <= now_ms:
            del self.locks[member]  # PX expiry
            return None
        return lock

    def claim(self, batch_size: int, lease_ms: int, worker_id: str) -> ClaimResult:
        now_ms = to_ms(self.now)
        due = sorted((s, m) for m, s in self.scores.items() if s <= now_ms)
        items: list[ClaimedItem] = []
        stuck: list[str] = []
        contended = 0
        for score, member in due:
            if len(items) >= batch_size:
                break
            if member not in self.payloads:  # STUCK_MEMBER: removed and reported
                del self.scores[member]
                stuck.append(member)
                continue
            if self._lock_of(member, now_ms) is not None:
                contended += 1
                continue
            self.fence += 1
            self.locks[member] = FakeLock(self.fence, worker_id, now_ms + lease_ms)
            self.scores[member] = now_ms + lease_ms  # visibility timeout
            items.append(ClaimedItem(self.payloads[member], self.fence, score))
        rest = [s for m, s in self.scores.items() if s > now_ms or m in self.locks]
        return ClaimResult(self.now, items, stuck, contended, min(rest) if rest else None)

    def apply(self, ops: Sequence[ApplyOp]) -> list[ApplyOutcome]:
        return [self._apply_one(op, restore=False) for op in ops]

    def restore(self, escalations: Sequence[Escalation],
                notifications: Mapping[UUID, dict[str, str]] | None = None,
                ) -> list[ApplyOutcome]:
        actions = {Status.PENDING: ApplyAction.RESCHEDULE, Status.PAUSED: ApplyAction.PARK,
                   Status.TERMINAL: ApplyAction.REMOVE, Status.CANCELLED: ApplyAction.REMOVE}
        notes = notifications or {}
        return [self._apply_one(ApplyOp(e, actions[e.status], notify=notes.get(e.dispute_id)),
                                restore=True)
                for e in escalations]

    def payload(self, dispute_id: UUID) -> dict[str, str] | None:
        esc = self.payloads.get(str(dispute_id))
        return None if esc is None else {"seq": str(esc.seq), "tier": esc.tier}

    def _apply_one(self, op: ApplyOp, *, restore: bool) -> ApplyOutcome:
        esc, member = op.escalation, str(op.escalation.dispute_id)
        lock = self._lock_of(member, to_ms(self.now))
        owned = op.token is not None and lock is not None and lock.token == op.token
        payload = self.payloads.get(member)
        if payload is None:
            if not restore or op.action is ApplyAction.REMOVE:
                return ApplyOutcome.MISSING
            if lock is not None:
                return ApplyOutcome.NOT_OWNER
            self._write(op)
            if op.notify:  # re-created payload: the caller checked the stream (apply.lua)
                self.review.append(dict(op.notify))
            return ApplyOutcome.APPLIED
        if payload.seq >= esc.seq:
            out = ApplyOutcome.STALE_SEQ
            same = payload.seq == esc.seq and op.action is ApplyAction.RESCHEDULE
            if restore and lock is None and same and member not in self.scores:
                self.scores[member] = to_ms(esc.due_at)
                out = ApplyOutcome.APPLIED
            if owned:
                if same and member in self.scores:  # claim handed back without a decision
                    self.scores[member] = to_ms(payload.due_at)
                del self.locks[member]
            return out
        if (op.token is not None and not owned) or (restore and lock is not None):
            return ApplyOutcome.NOT_OWNER
        self._write(op)
        if op.notify and int(op.notify.get("seq", payload.seq + 1)) > payload.seq:
            self.review.append(dict(op.notify))  # apply.lua's notify seq guard
        if op.token is not None:
            self.locks.pop(member, None)
        return ApplyOutcome.APPLIED

    def _write(self, op: ApplyOp) -> None:
        member = str(op.escalation.dispute_id)
        if op.action is ApplyAction.REMOVE:
            self.scores.pop(member, None)
            self.payloads.pop(member, None)
            return
        self.payloads[member] = op.escalation
        if op.action is ApplyAction.RESCHEDULE:
            self.scores[member] = to_ms(op.escalation.due_at)
        else:
            self.scores.pop(member, None)

    def notified(self, wanted: Mapping[str, tuple[str, int]], count: int = 1000) -> set[str]:
        keys = {key for key, _ in wanted.values()}
        return {e["idempotency_key"] for e in self.review if e.get("idempotency_key") in keys}

    def cancel(self, dispute_id: UUID, notify: dict[str, str] | None = None) -> bool:
        member = str(dispute_id)
        payload = self.payloads.get(member)
        if notify and payload is not None and payload.seq < int(notify["seq"]):
            self.review.append(dict(notify))  # cancel.lua: a decision never applied
        found = member in self.scores or member in self.payloads or member in self.locks
        for table in (self.scores, self.payloads, self.locks):
            table.pop(member, None)  # type: ignore[attr-defined]
        return found


@dataclass
class FakeAuditLog:
    """The AuditLog port on dicts: ``states`` (the projection) and ``ledger`` (append only).

    Ledger rows carry no hashes (``prev_hash``/``row_hash`` are empty): the chain is the
    PostgreSQL adapter's business and is tested there.
    """

    states: dict[UUID, Escalation] = field(default_factory=dict)
    ledger: list[LedgerRow] = field(default_factory=list)

    def _append(self, esc: Escalation, event: str, match_decision: str, actor: str,
                decided_at: datetime, *, from_tier: str | None, to_tier: str | None,
                due_at: datetime | None, next_due_at: datetime | None,
                token: int | None = None, details: Mapping[str, Any] | None = None) -> None:
        self.ledger.append(LedgerRow(
            dispute_id=esc.dispute_id, seq=esc.seq, event=event, match_decision=match_decision,
            from_tier=from_tier, to_tier=to_tier, ladder=esc.ladder,
            ladder_version=esc.ladder_version, materiality=str(esc.materiality),
            due_at=due_at, next_due_at=next_due_at, decided_at=decided_at, recorded_at=None,
            actor=actor, trace_id=esc.trace_id, source_hash=esc.source_hash,
            external_id=esc.external_id, fence_token=token, details=dict(details or {}),
            prev_hash="", row_hash=""))

    def events(self, dispute_id: UUID) -> list[str]:
        """The ledger events of one dispute, oldest first."""
        return [r.event for r in self.ledger if r.dispute_id == dispute_id]

    def record_enqueue_many(
        self, escalations: Sequence[Escalation], actor: str, decided_at: datetime,
        calendar_versions: Mapping[UUID, str] | None = None,
        details: Mapping[UUID, Mapping[str, object]] | None = None,
    ) -> list[tuple[bool, Escalation]]:
        require_aware(decided_at, "decided_at")
        out: list[tuple[bool, Escalation]] = []
        for esc in escalations:
            if esc.status is not Status.PENDING:
                raise InvalidInput(f"only a pending escalation can be enqueued ({esc.status})")
        for esc in escalations:
            current = self.states.get(esc.dispute_id)
            if current is not None:
                out.append((False, current))
                continue
            state = esc.with_changes(seq=1, status=Status.PENDING)
            self.states[esc.dispute_id] = state
            self._append(state, "ENQUEUED", "ENQUEUED", actor, decided_at, from_tier=None,
                         to_tier=esc.tier, due_at=esc.due_at, next_due_at=esc.due_at,
                         # as the real store's rows (adapters.audit_enqueue.enqueued_details)
                         details={"entered_tier_at": esc.entered_tier_at.isoformat(),
                                  **((details or {}).get(esc.dispute_id) or {})})
            out.append((True, state))
        return out

    def record_decisions(
        self, items: Sequence[tuple[ClaimedItem, Decision]], actor: str
    ) -> list[RecordOutcome]:
        for _claimed, decision in items:  # nothing is written if one is invalid
            check_recordable(decision)
        outcomes: list[RecordOutcome] = []
        for claimed, decision in items:
            state = self.states.get(claimed.escalation.dispute_id)
            head = None if state is None else ProjectionHead(
                state.status, state.seq, state.tier,
                state.due_at if state.status is Status.PENDING else None,
                state.regulatory_deadline)
            plan = plan_record(RecordRequest(head, claimed.escalation.seq, decision))
            if state is None or plan.entry is None or plan.head is None:
                outcomes.append(RecordOutcome(plan.status, state))
                continue
            after, entry = plan.head, plan.entry
            new = state.with_changes(
                seq=entry.seq, tier=after.tier, status=after.status,
                due_at=after.due_at or entry.decided_at,
                entered_tier_at=plan.entered_tier_at or state.entered_tier_at,
                regulatory_deadline=after.regulatory_deadline)
            self.states[state.dispute_id] = new
            self._append(new, entry.event, entry.match_decision, actor, entry.decided_at,
                         from_tier=entry.from_tier, to_tier=entry.to_tier, due_at=entry.due_at,
                         next_due_at=entry.next_due_at, token=claimed.token,
                         details=({"deadline": decision.deadline_detail}
                                  if decision.deadline_detail is not None else None))
            outcomes.append(RecordOutcome(RecordStatus.RECORDED, new))
        return outcomes

    def record_cancel(
        self, dispute_id: UUID, actor: str, decided_at: datetime, reason: str
    ) -> Escalation:
        state = self.states.get(dispute_id)
        if state is None:
            raise NotFound(f"no escalation recorded for dispute {dispute_id}")
        if state.status is Status.CANCELLED:
            return state
        if state.status is Status.TERMINAL:
            raise ConflictError(f"dispute {dispute_id} already reached terminal escalation")
        return self.append(state, "CANCELLED", actor, decided_at, status=Status.CANCELLED,
                           details={"reason": reason})

    def record_stuck(
        self, dispute_id: UUID, actor: str, decided_at: datetime
    ) -> Escalation | None:
        state = self.states.get(dispute_id)
        if state is None:
            return None
        return self.append(state, "STUCK_MEMBER", actor, decided_at)

    def append(self, state: Escalation, event: str, actor: str, decided_at: datetime,
               *, details: Mapping[str, Any] | None = None, **changes: Any) -> Escalation:
        """Append one event at ``state.seq + 1`` with projection ``changes`` (test helper,
        also used to make a projection move on behind a worker's back)."""
        new = state.with_changes(seq=state.seq + 1, **changes)
        self.states[state.dispute_id] = new
        self._append(new, event, event, actor, decided_at, from_tier=state.tier,
                     to_tier=new.tier, due_at=state.due_at, next_due_at=new.due_at,
                     details=details)
        return new

    def get(self, dispute_id: UUID) -> tuple[Escalation, Status] | None:
        state = self.states.get(dispute_id)
        return None if state is None else (state, state.status)

    def trail(self, dispute_id: UUID) -> list[LedgerRow]:
        """The ``EventLog`` read: one dispute's rows, oldest first."""
        return [r for r in self.ledger if r.dispute_id == dispute_id]

    def append_event(
        self, dispute_id: UUID, event: str, match_decision: str, actor: str,
        decided_at: datetime, changes: dict[str, Any], details: dict[str, Any], *,
        expected_seq: int | None = None, calendar_version: str | None = None,
    ) -> Escalation:
        """The ``EventLog`` write, as the adapter's: CAS on seq, a non-pending status clears
        ``due_at``; ``obligations`` is a projection-only column (not on the value object)."""
        state = self.states.get(dispute_id)
        if state is None:
            raise NotFound(f"no escalation recorded for dispute {dispute_id}")
        if expected_seq is not None and state.seq != expected_seq:
            raise ConflictError(f"dispute {dispute_id} is at seq {state.seq}")
        clean = {k: v for k, v in changes.items() if k != "obligations"}
        if "deadlines" in clean:
            clean["deadlines"] = tuple(clean["deadlines"] or ())
        if "status" in clean:
            clean["status"] = Status(clean["status"])
        new = state.with_changes(seq=state.seq + 1, **clean)
        self.states[dispute_id] = new
        self._append(new, event, match_decision, actor, decided_at, from_tier=state.tier,
                     to_tier=new.tier, due_at=state.due_at, next_due_at=new.due_at,
                     details=details)
        return new

    def get_many(self, dispute_ids: Iterable[UUID]) -> dict[UUID, Escalation]:
        return {d: self.states[d] for d in dispute_ids if d in self.states}

    def unapplied_decisions(
        self, ranges: Sequence[tuple[UUID, int, int]]
    ) -> dict[UUID, LedgerRow]:
        out: dict[UUID, LedgerRow] = {}
        for dispute_id, after, upto in ranges:
            rows = [r for r in self.ledger if r.dispute_id == dispute_id
                    and after < r.seq <= upto and r.event in ("PROMOTED", "TERMINAL")]
            if rows:
                out[dispute_id] = max(rows, key=lambda r: r.seq)
        return out


@dataclass
class FakeLadders:
    """The LadderSource port over a fixed set of ladder versions."""

    ladders: list[Ladder]

    def get(self, name: str, version: int) -> Ladder:
        for ladder in self.ladders:
            if (ladder.name, ladder.version) == (name, version):
                return ladder
        raise LadderError(f"unknown ladder {name}@{version}")

    def latest(self, name: str) -> Ladder:
        found = [lad for lad in self.ladders if lad.name == name]
        if not found:
            raise LadderError(f"unknown ladder {name}")
        return max(found, key=lambda lad: lad.version)

