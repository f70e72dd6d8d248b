"""In-memory fakes of the ports, for unit tests of the service layer.

Each fake has the behaviour of its adapter (not canned answers): ``FakeScheduler`` follows
the rules of claim.lua / apply.lua / enqueue.lua / cancel.lua on dicts (plain due order, no
shards or ready set), ``FakeAuditLog`` keeps a projection and an append-only ledger and
records decisions with the same domain rule as the PostgreSQL store
(``escalation.domain.record_rule.plan_record``). The others, each over those two where its
adapter shares their state: tokens and console sessions, ledger search and reports, dead
letters and review streams (the Redis scripts' rules), the leader lease and the maintenance
run table (its per-occurrence compare-and-set), ladder releases, the warnings queue and the
resync mark, doctor's reads and server probe, the console's deadline queries. ``pending``
and ``seed`` build and record an escalation as an enqueue would.

The integration tests check the adapters against the real servers; these fakes let each use
case be tested branch by branch in milliseconds. ``_implements`` at the end lets mypy check
that every fake implements its port's Protocol (``mypy tests/fakes.py``, run by CI).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from escalation.domain.access import TokenInfo
from escalation.domain.audit_hash import GENESIS as AUDIT_GENESIS
from escalation.domain.audit_hash import row_hash
from escalation.domain.decide import Decision
from escalation.domain.errors import ConflictError, InvalidInput, LadderError, NotFound
from escalation.domain.escalation import Escalation, Status
from escalation.domain.ladder import Ladder, unknown_ladder
from escalation.domain.materiality import Materiality
from escalation.domain.merkle import checkpoint_hash, head_leaf, merkle_root, retention_hash
from escalation.domain.migration_rule import LockedHead, check_batch
from escalation.domain.record_rule import (
    ProjectionHead,
    RecordRequest,
    check_recordable,
    plan_record,
)
from escalation.domain.timeutil import require_aware, to_ms
from escalation.ports import (
    ALL_OPEN,
    DEAD_DECISION,
    DEAD_NOTIFY,
    ApplyAction,
    ApplyOp,
    ApplyOutcome,
    AuditFilter,
    AuditLog,
    BatchResult,
    ChainEvent,
    ChangedChains,
    Checkpoint,
    CheckpointSignature,
    CheckpointSnapshot,
    CheckpointStore,
    ClaimedItem,
    ClaimResult,
    ClockFilter,
    ClockKey,
    DeadlineChain,
    EventLog,
    EvidenceFile,
    HistoryRow,
    LadderHistory,
    LadderSource,
    Lease,
    LedgerCheck,
    LedgerEvent,
    LedgerReports,
    LedgerRow,
    LedgerSearch,
    MaintenanceRuns,
    MemberState,
    MigrationBatch,
    NewRelease,
    NewRun,
    NewToken,
    NotifyRetry,
    OccurrenceClaim,
    OpenFilter,
    Page,
    PendingEscalation,
    PendingFilter,
    RecordOutcome,
    RecordStatus,
    ReleaseRow,
    Replan,
    ResyncMark,
    RetentionRecord,
    Scheduler,
    SealedHead,
    SessionSeen,
    SessionStore,
    TierCount,
    TokenStore,
    WarningMember,
    WarningQueue,
)
from escalation.service_layer.case_file import CaseFileSources
from escalation.service_layer.dead_letters import DeadLetterQueue
from escalation.service_layer.deadline_outcomes import ConsoleQueries
from escalation.service_layer.doctor import DoctorRedis, DoctorStore, ServerProbe
from escalation.service_layer.notify import ReviewStreams
from escalation.service_layer.sla_rollup import RollupStore


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
            table.pop(member, None)
        return found


@dataclass
class FakeAuditLog:
    """The AuditLog port on dicts: ``states`` (the projection) and ``ledger`` (append only).

    Ledger rows carry no hashes (``prev_hash``/``row_hash`` are empty): the chain is the
    PostgreSQL adapter's business and is tested there. With ``hashed`` they carry the real
    chain (``domain.audit_hash.row_hash`` over the row, ``chain_created_at`` the decision
    time of the dispute's first row), for the use cases that verify or export it
    (checkpoints, the case file).
    """

    states: dict[UUID, Escalation] = field(default_factory=dict)
    ledger: list[LedgerRow] = field(default_factory=list)
    hashed: bool = False

    def _append(self, esc: Escalation, event: str, match_decision: str, actor: str,
                decided_at: datetime, *, from_tier: str | None, to_tier: str | None,
                due_at: datetime | None, next_due_at: datetime | None,
                token: int | None = None, details: Mapping[str, Any] | None = None) -> None:
        row = LedgerRow(
            dispute_id=esc.dispute_id, seq=esc.seq, event=event, match_decision=match_decision,
            from_tier=from_tier, to_tier=to_tier, ladder=esc.ladder,
            ladder_version=esc.ladder_version, materiality=str(esc.materiality),
            due_at=due_at, next_due_at=next_due_at, decided_at=decided_at, recorded_at=None,
            actor=actor, trace_id=esc.trace_id, source_hash=esc.source_hash,
            external_id=esc.external_id, fence_token=token, details=dict(details or {}),
            prev_hash="", row_hash="")
        if self.hashed:
            chain = self.trail(esc.dispute_id)
            prev = bytes.fromhex(chain[-1].row_hash) if chain else AUDIT_GENESIS
            row = replace(row, prev_hash=prev.hex(),
                          chain_created_at=chain[0].decided_at if chain else decided_at)
            row = replace(row, row_hash=row_hash(prev, asdict(row)).hex())
        self.ledger.append(row)

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
                         # as the real store's rows (adapters.audit_store.enqueued_details)
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

    def append_event(self, entry: LedgerEvent) -> Escalation:
        """The ``EventLog`` write, as the adapter's: CAS on seq; ``obligations`` and
        ``remaining_ms`` are projection-only columns (not on the value object, which keeps
        its last ``due_at`` where the projection clears it)."""
        dispute_id, event, match_decision = entry.dispute_id, entry.event, entry.match_decision
        actor, decided_at, changes = entry.actor, entry.decided_at, entry.changes
        details, expected_seq = dict(entry.details), entry.expected_seq
        state = self.states.get(dispute_id)
        if state is None:
            raise NotFound(f"no escalation recorded for dispute {dispute_id}")
        if expected_seq is not None and state.seq != expected_seq:
            raise ConflictError(f"dispute {dispute_id} is at seq {state.seq}")
        clean = {k: v for k, v in changes.items() if k not in ("obligations", "remaining_ms")}
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
        if not found:  # as the adapter: LadderNotFound (exit 3), malformed: LadderError
            raise unknown_ladder(name, {lad.name for lad in self.ladders})
        return max(found, key=lambda lad: lad.version)



def pending(ladder: Ladder, tier: str, due_at: datetime, *, dispute_id: UUID | None = None,
            materiality: str = "10.00", entered_tier_at: datetime | None = None,
            external_id: str | None = None) -> Escalation:
    """A pending escalation on ``ladder`` at ``tier``, due ``due_at`` (seq 0: not recorded)."""
    return Escalation(
        dispute_id=dispute_id or uuid4(), tier=tier, due_at=due_at,
        materiality=Materiality.parse(materiality), source_hash="ab" * 32, ladder=ladder.name,
        ladder_version=ladder.version, seq=0,
        entered_tier_at=entered_tier_at or due_at - timedelta(hours=1),
        trace_id="t" * 32, external_id=external_id)


def seed(store: FakeAuditLog, scheduler: FakeScheduler, esc: Escalation,
         at: datetime | None = None) -> Escalation:
    """Record ``esc``'s ENQUEUED row and schedule it, as an enqueue does; the recorded state."""
    [(_, state)] = store.record_enqueue_many([esc], "seed", at or scheduler.now)
    scheduler.enqueue_many([state])
    return state


@dataclass
class FakeTokenStore:
    """The TokenStore port on a dict by name; ``now`` is the database clock."""

    now_at: datetime
    tokens: dict[str, tuple[TokenInfo, str]] = field(default_factory=dict)

    def now(self) -> datetime:
        return self.now_at

    def insert(self, token: NewToken) -> TokenInfo:
        if token.name in self.tokens:
            raise ConflictError(f"a token named {token.name!r} exists")
        info = TokenInfo(token.name, token.role, self.now_at, token.expires_at, None,
                         token.sources, token.read_only)
        self.tokens[token.name] = (info, token.digest)
        return info

    def by_digest(self, digest: str) -> tuple[TokenInfo, str] | None:
        return next(((i, d) for i, d in self.tokens.values() if d == digest), None)

    def all(self) -> list[TokenInfo]:
        return [self.tokens[n][0] for n in sorted(self.tokens)]

    def revoke(self, name: str, at: datetime) -> TokenInfo | None:
        found = self.tokens.get(name)
        if found is None:
            return None
        info, digest = found
        if info.revoked_at is None:
            info = replace(info, revoked_at=at)
            self.tokens[name] = (info, digest)
        return info


@dataclass
class FakeSession:
    token_name: str
    issued_at: datetime
    ends_at: datetime
    seen_at: datetime
    ended: str | None = None
    rotated_at: datetime | None = None


@dataclass
class FakeSessionStore:
    """The SessionStore port on a dict by id digest, over a FakeTokenStore (its clock and
    tokens: a session dies with its token)."""

    tokens: FakeTokenStore
    sessions: dict[str, FakeSession] = field(default_factory=dict)

    def _token(self, name: str) -> TokenInfo:
        return self.tokens.tokens[name][0]

    def start(self, digest: str, token_name: str, lifetime_s: float) -> None:
        now = self.tokens.now()
        self.sessions[digest] = FakeSession(token_name, now,
                                            now + timedelta(seconds=lifetime_s), now)

    def _live(self, s: FakeSession, idle_s: float) -> bool:
        now = self.tokens.now()
        return (s.ended is None and now < s.ends_at
                and (now - s.seen_at).total_seconds() <= idle_s
                and self._token(s.token_name).state(now) == "active")

    def touch(self, digest: str, idle_s: float, grace_s: float) -> SessionSeen | None:
        s = self.sessions.get(digest)
        now = self.tokens.now()
        if s is None:
            return None
        if s.rotated_at is not None:
            ago = (now - s.rotated_at).total_seconds()
            if ago < grace_s and now < s.ends_at:
                return SessionSeen(self._token(s.token_name), 0.0, ago)
            return None
        if not self._live(s, idle_s):
            return None
        s.seen_at = now
        return SessionSeen(self._token(s.token_name), (now - s.issued_at).total_seconds(), None)

    def rotate(self, digest: str, new_digest: str) -> bool:
        s = self.sessions.get(digest)
        if s is None or s.ended is not None or s.rotated_at is not None:
            return False
        now = self.tokens.now()
        s.rotated_at = now
        self.sessions[new_digest] = FakeSession(s.token_name, now, s.ends_at, now)
        return True

    def end(self, digest: str, why: str) -> bool:
        s = self.sessions.get(digest)
        if s is None or s.ended is not None or s.rotated_at is not None:
            return False
        s.ended = why
        return True


def _search_key(r: LedgerRow) -> tuple[datetime, UUID, int]:
    """The order of ``audit search``: decided_at, dispute, seq."""
    return r.decided_at, r.dispute_id, r.seq


@dataclass
class FakeLedgerSearch:
    """The LedgerSearch port over a FakeAuditLog's ledger (the filters of ``AuditFilter``)."""

    log: FakeAuditLog

    def _match(self, r: LedgerRow, f: AuditFilter) -> bool:
        for at in (f.since, f.until):
            if at is not None:
                require_aware(at, "since/until")
        return ((f.dispute_id is None or r.dispute_id == f.dispute_id)
                and (f.tier is None or f.tier in (r.from_tier, r.to_tier))
                and (f.decision is None or f.decision in (r.match_decision, r.event))
                and (f.since is None or r.decided_at >= f.since)
                and (f.until is None or r.decided_at < f.until)
                and (f.actor is None or r.actor == f.actor)
                and (f.ladder is None or r.ladder == f.ladder)
                and (f.ladder_version is None or r.ladder_version == f.ladder_version))

    def ledger_events(self) -> frozenset[str]:
        return frozenset({"ENQUEUED", "PROMOTED", "TERMINAL", "CANCELLED", "PAUSED",
                          "RESUMED", "STUCK_MEMBER"})

    def recorded_decisions(self) -> list[str]:
        return sorted({r.match_decision for r in self.log.ledger})

    def search(self, flt: AuditFilter, limit: int,
               after: tuple[datetime, UUID, int] | None = None) -> list[LedgerRow]:
        rows = sorted((r for r in self.log.ledger if self._match(r, flt)), key=_search_key)
        if after is not None:
            rows = [r for r in rows if _search_key(r) > after]
        return rows[:limit]

    def count(self, flt: AuditFilter) -> int:
        return sum(1 for r in self.log.ledger if self._match(r, flt))

    def stream(self, flt: AuditFilter, columns: Sequence[str]) -> Iterator[Mapping[Any, Any]]:
        for r in self.search(flt, len(self.log.ledger)):
            yield {c: getattr(r, c, None) for c in columns}



@dataclass
class FakeDeadLetterQueue:
    """The DeadLetterQueue port over a FakeScheduler (its clock, payloads and locks), as the
    Redis scripts behave: a poison escalation leaves the pending ZSET under its claim token
    and keeps its payload; a retry puts it back due now; a purge of one deletes its payload.
    ``requeued_notifications``: the records a notify retry handed back to the notifier."""

    scheduler: FakeScheduler
    failures: dict[str, int] = field(default_factory=dict)
    dead: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    requeued_notifications: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def now_ms(self) -> int:
        return to_ms(self.scheduler.now)

    def count_decision_failure(self, dispute_id: str) -> int:
        self.failures[dispute_id] = self.failures.get(dispute_id, 0) + 1
        return self.failures[dispute_id]

    def dead_letter_decision(self, dispute_id: str, token: int, record_json: str) -> int:
        lock = self.scheduler._lock_of(dispute_id, self.now_ms())
        if lock is None or lock.token != token:
            return 0
        del self.scheduler.locks[dispute_id]
        self.scheduler.scores.pop(dispute_id, None)
        self.failures.pop(dispute_id, None)
        self.dead[DEAD_DECISION + dispute_id] = (self.now_ms(), json.loads(record_json))
        return self.now_ms()

    def add_notification(self, member: str, at_ms: int, record: dict[str, Any]) -> None:
        """Test helper: a notification dead-lettered at ``at_ms`` (as notify's script)."""
        self.dead[DEAD_NOTIFY + member] = (at_ms, record)

    def dead_list(self, limit: int = 100) -> list[tuple[str, int, dict[str, Any]]]:
        rows = sorted(self.dead.items(), key=lambda kv: (kv[1][0], kv[0]))
        return [(m, at, dict(rec)) for m, (at, rec) in rows[:limit]]

    def dead_get(self, member: str) -> tuple[int, dict[str, Any]] | None:
        got = self.dead.get(member)
        return None if got is None else (got[0], dict(got[1]))

    def retry_dead(self, member: str, kind: str, target: str, record_json: str) -> str:
        if member not in self.dead:
            return "absent"
        if kind == "decision":
            if target not in self.scheduler.payloads:
                return "no_payload"
            self.scheduler.scores[target] = self.now_ms()
        else:
            self.requeued_notifications.append((target, json.loads(record_json)))
        del self.dead[member]
        return "requeued"

    def dead_count(self) -> int:
        return len(self.dead)

    def purge_dead(self, member: str, dispute_id: str | None) -> None:
        self.dead.pop(member, None)
        if dispute_id is not None:
            for table in (self.scheduler.scores, self.scheduler.payloads, self.scheduler.locks):
                table.pop(dispute_id, None)



class FakeLease:
    """The Lease port: ``leader`` says whether this process holds the lease (tests flip it);
    ``monotonic`` is the clock ``Maintenance.poll`` paces its checks by."""

    def __init__(self, now_ms: int, *, leader: bool = True) -> None:
        self.now_ms_at, self.leader, self.polls = now_ms, leader, 0
        self.ttl_ms, self.margin, self.monotonic = 10_000, 0.2, 0.0
        self.clock = lambda: self.monotonic

    def poll(self) -> bool:
        self.polls += 1
        return self.leader

    def is_leader(self) -> bool:
        return self.leader

    def release(self) -> bool:
        held, self.leader = self.leader, False
        return held

    def now_ms(self) -> int:
        return self.now_ms_at


@dataclass
class FakeMaintenanceRuns:
    """The MaintenanceRuns port on a dict by job: the per-occurrence compare-and-set of
    ``adapters.maintenance_runs`` (an occurrence is ``floor(now / interval) * interval``)."""

    last: dict[str, int] = field(default_factory=dict)
    missed: dict[str, int] = field(default_factory=dict)
    finished: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def claim(self, job: str, interval_s: int, now_ms: int, actor: str) -> OccurrenceClaim | None:
        interval_ms = interval_s * 1000
        occ = now_ms // interval_ms * interval_ms
        last = self.last.get(job, 0)
        if last >= occ:
            return None
        missed = 0 if last <= 0 else max(0, (occ - last) // interval_ms - 1)
        self.last[job] = occ
        self.missed[job] = self.missed.get(job, 0) + missed
        return OccurrenceClaim(occ, missed)

    def finish(self, job: str, status: str, details: dict[str, Any]) -> None:
        self.finished.append((job, status, details))

    def rows(self) -> list[dict[str, Any]]:
        return [{"job": j, "last_occurrence_ms": at, "missed": self.missed.get(j, 0)}
                for j, at in sorted(self.last.items())]



@dataclass
class FakeReleaseHistory:
    """The release half of the LadderHistory port (what ``ladder release`` and the baseline
    use: released and applied checksums, release, baseline) on a dict; ``applied``: the
    checksums an earlier ``ladder apply`` recorded."""

    rows: dict[tuple[str, int], ReleaseRow] = field(default_factory=dict)
    applied: dict[tuple[str, int], str] = field(default_factory=dict)

    def applied_checksums(self) -> dict[tuple[str, int], str]:
        return {**self.applied, **self.released_checksums()}

    def releases(self, ladder: str | None = None) -> dict[tuple[str, int], ReleaseRow]:
        return {k: r for k, r in self.rows.items() if ladder is None or k[0] == ladder}

    def released_checksums(self) -> dict[tuple[str, int], str]:
        return {k: r.checksum for k, r in self.rows.items()}

    def release(self, rel: NewRelease) -> tuple[ReleaseRow, bool]:
        ladder, version, checksum = rel.ladder, rel.version, rel.checksum
        released_by, reason, released_at = rel.released_by, rel.reason, rel.released_at
        old = self.rows.get((ladder, version))
        if old is not None:
            if old.checksum != checksum:
                raise ConflictError(f"{ladder}@{version} was released with checksum "
                                    f"{old.checksum}; the file was edited")
            return old, False
        row = ReleaseRow(ladder, version, checksum, released_at, released_by, reason)
        self.rows[(ladder, version)] = row
        return row, True

    def baseline(self, files: Mapping[str, Sequence[tuple[int, str]]], *, released_by: str,
                 reason: str, released_at: datetime) -> list[ReleaseRow]:
        out = []
        for name, versions in files.items():
            if any(k[0] == name for k in self.rows):
                continue
            for version, checksum in versions:
                row = ReleaseRow(name, version, checksum, released_at, released_by, reason)
                self.rows[(name, version)] = row
                out.append(row)
        return out



@dataclass
class FakeLadderHistory(FakeReleaseHistory):
    """The whole LadderHistory port: the releases of :class:`FakeReleaseHistory`, the
    migration runs (``runs``, run id = index + 1) and their batches over a FakeAuditLog's
    projection and ledger (``log``). ``migrate_batch`` applies the per-dispute seq guard the
    PostgreSQL adapter applies under its row locks (``domain.migration_rule.check_batch``)
    and appends one LADDER_MIGRATED row per migrated escalation; ``finish`` appends no
    ledger row (the run's LADDER_APPLIED row is the adapter's, tested there).
    ``before_batch``: called with each batch before its rows are "locked" (a worker that
    decides in between)."""

    log: FakeAuditLog = field(default_factory=FakeAuditLog)
    runs: list[HistoryRow] = field(default_factory=list)
    before_batch: Callable[[MigrationBatch], None] | None = None

    def _set(self, run_id: int, **changes: Any) -> None:
        self.runs[run_id - 1] = replace(self.runs[run_id - 1], **changes)

    def history(self, ladder: str | None = None) -> list[HistoryRow]:
        return [r for r in self.runs if ladder is None or r.ladder == ladder]

    def open_run(self, ladder: str, version: int) -> HistoryRow | None:
        runs = [r for r in self.runs if (r.ladder, r.version) == (ladder, version)]
        return runs[-1] if runs and runs[-1].status in ("running", "failed") else None

    def start(self, run: NewRun) -> int:
        ladder, version, checksum, plan_hash = run.ladder, run.version, run.checksum, run.plan_hash
        applied_by, started_at, planned, reason = (run.applied_by, run.started_at, run.planned,
                                                   run.reason)
        if any(r.ladder == ladder and r.status == "running" for r in self.runs):
            raise ConflictError(f"an apply of {ladder} is running")
        self.runs.append(HistoryRow(
            run_id=len(self.runs) + 1, ladder=ladder, version=version, checksum=checksum,
            plan_hash=plan_hash, applied_by=applied_by, started_at=started_at,
            finished_at=None, status="running", planned=planned, migrated=0, replanned=0,
            skipped=0, blocked=0, not_owner=0, last_dispute_id=None,
            redis_synced_through=None, error=None, reason=reason))
        return len(self.runs)

    def resume(self, run_id: int, applied_by: str, reason: str = "") -> None:
        if self.runs[run_id - 1].status != "failed":
            raise ConflictError(f"run {run_id} is not failed")
        self._set(run_id, status="running", applied_by=applied_by, reason=reason, error=None)

    def finish(self, run_id: int, status: str, finished_at: datetime,
               error: str | None = None) -> None:
        self._set(run_id, status=status, finished_at=finished_at, error=error)

    def note_redis(self, run_id: int, through: UUID, not_owner: int) -> None:
        run = self.runs[run_id - 1]
        self._set(run_id, redis_synced_through=through, not_owner=run.not_owner + not_owner)

    def open_escalations(self, ladder: str, after: UUID | None, limit: int,
                         flt: OpenFilter = ALL_OPEN) -> list[Escalation]:
        # UUIDs compare as their 16 bytes big-endian: PostgreSQL's uuid order
        below_version, at_version, through = flt.below_version, flt.at_version, flt.through
        rows = sorted((e for e in self.log.states.values()
                       if e.ladder == ladder and e.status in (Status.PENDING, Status.PAUSED)
                       and (below_version is None or e.ladder_version < below_version)
                       and (at_version is None or e.ladder_version == at_version)
                       and (after is None or e.dispute_id > after)
                       and (through is None or e.dispute_id <= through)),
                      key=lambda e: e.dispute_id)
        return rows[:limit]

    def open_page(self, ladder: str, after: UUID | None, limit: int, *,
                  below_version: int) -> Page:
        found = self.open_escalations(ladder, after, limit, OpenFilter(below_version=below_version))
        return Page({e.dispute_id: {"last_seq": e.seq} for e in found}, found)

    def count_open(self, ladder: str, below_version: int) -> int:
        return len(self.open_escalations(ladder, None, 1 << 30,
                                         OpenFilter(below_version=below_version)))

    def states(self, ids: Sequence[UUID]) -> dict[UUID, Escalation]:
        return self.log.get_many(ids)

    def migrate_batch(self, batch: MigrationBatch, replan: Replan) -> BatchResult:
        if self.before_batch is not None:
            self.before_batch(batch)
        items = sorted(batch.items, key=lambda b: b[0].dispute_id)
        if not items and batch.through is None:
            return BatchResult()
        states = self.log.states
        heads = {item.dispute_id: LockedHead(s.status, s.seq, s.ladder_version)
                 for item, _ in items if (s := states.get(item.dispute_id)) is not None}
        checked = check_batch(items, heads, batch.target_version,
                              lambda did: replan(states[did]))
        result = BatchResult(replanned=checked.replanned, skipped=checked.skipped,
                             blocked=checked.blocked, suppressed=checked.suppressed)
        for item, due in checked.moves:
            state = states[item.dispute_id]
            changes: dict[str, Any] = {"ladder_version": item.to_version, "tier": item.to_tier}
            if state.status is Status.PENDING:
                changes["due_at"] = due
            result.migrated.append(self.log.append(
                state, "LADDER_MIGRATED", batch.actor, batch.decided_at,
                details={**batch.details, "from_version": item.from_version,
                         "to_version": item.to_version, "due_rule": item.due.rule.value},
                **changes))
        run = self.runs[batch.run_id - 1]
        self._set(batch.run_id, migrated=run.migrated + len(result.migrated),
                  replanned=run.replanned + result.replanned,
                  skipped=run.skipped + result.skipped,
                  blocked=run.blocked + len(result.blocked) + batch.blocked,
                  last_dispute_id=batch.through or items[-1][0].dispute_id)
        return result


# ----------------------------------------------------------------------------- checkpoints
def first_bad_seq(rows: Sequence[LedgerRow]) -> int | None:
    """The seq of the first row of one dispute's chain (oldest first) whose seq, prev_hash or
    row_hash does not recompute (``domain.audit_hash.row_hash``), or None."""
    prev = AUDIT_GENESIS
    for n, r in enumerate(rows, start=1):
        if (r.seq != n or r.prev_hash != prev.hex()
                or row_hash(prev, asdict(r)).hex() != r.row_hash):
            return r.seq
        prev = bytes.fromhex(r.row_hash)
    return None


@dataclass
class FakeCheckpointStore:
    """The CheckpointStore port over a hashed FakeAuditLog's ledger (``log``, built with
    ``hashed=True``): each dispute's rows are its chain and its last row its current head
    (the fake has no ladder chains). ``projection_mismatch``: dispute -> columns, what the
    projection check reports (the fake's projection never drifts by itself). ``retention``,
    ``tables``, ``now``: the retention rows, the ledger's partition tables and the database
    clock. As ``adapters.checkpoints`` stores them, ``heads`` holds per checkpoint id the
    heads it stores (the first one: all; a later one: those changed since the one before,
    and ``removed`` the chains it no longer seals); :meth:`sealed_at` reads back what a
    checkpoint seals."""

    log: FakeAuditLog
    now: datetime
    checkpoints: list[Checkpoint] = field(default_factory=list)
    heads: dict[int, list[tuple[UUID, int, bytes, datetime]]] = field(default_factory=dict)
    removed: dict[int, list[UUID]] = field(default_factory=dict)
    projection_mismatch: dict[UUID, str] = field(default_factory=dict)
    retention: list[RetentionRecord] = field(default_factory=list)
    tables: dict[str, bool] = field(default_factory=dict)

    def sealed_at(self, checkpoint_id: int) -> list[tuple[UUID, int, bytes, datetime]]:
        """The heads ``checkpoint_id`` seals: per chain, the newest stored at a checkpoint
        <= it (none for a checkpoint that does not exist)."""
        if checkpoint_id not in self.heads:
            return []
        out: dict[UUID, tuple[UUID, int, bytes, datetime]] = {}
        for cid in range(1, checkpoint_id + 1):
            out.update((h[0], h) for h in self.heads.get(cid, []))
            for d in self.removed.get(cid, []):
                out.pop(d, None)
        return sorted(out.values(), key=lambda h: h[0].bytes)

    def chains(self) -> dict[UUID, list[LedgerRow]]:
        """Each dispute's rows, by seq."""
        out: dict[UUID, list[LedgerRow]] = {}
        for r in self.log.ledger:
            out.setdefault(r.dispute_id, []).append(r)
        return {d: sorted(rows, key=lambda r: r.seq) for d, rows in out.items()}

    def broken_chains(
        self, dispute_id: UUID | None,
        progress: Callable[[str, int, int | None], None] | None = None,
    ) -> list[tuple[UUID, int]]:
        out = []
        for d, rows in self.chains().items():
            if dispute_id is not None and d != dispute_id:
                continue
            bad = first_bad_seq(rows)
            if bad is not None:
                out.append((d, bad))
        return out

    def check_ledger(
        self, progress: Callable[[str, int, int | None], None] | None = None,
        projection: bool = True,
    ) -> LedgerCheck:
        snap = FakeCheckpointSnapshot(self)
        disputes, rows = snap.ledger_counts(None)
        return LedgerCheck(sorted(self.broken_chains(None), key=lambda i: str(i[0])),
                           snap.projection_mismatches(None) if projection else [],
                           disputes, rows, projection)

    def retained_from(self) -> datetime | None:
        return max((r.range_to for r in self.retention), default=None)

    @contextmanager
    def _snapshot(self) -> Iterator[FakeCheckpointSnapshot]:
        yield FakeCheckpointSnapshot(self)

    def snapshot(self) -> AbstractContextManager[CheckpointSnapshot]:
        return self._snapshot()

    def seal(
        self, actor: str, before_seal: Callable[[CheckpointSnapshot], None] | None = None,
        sign: Callable[[Checkpoint], CheckpointSignature] | None = None,
    ) -> Checkpoint:
        if before_seal is not None:
            before_seal(FakeCheckpointSnapshot(self))
        heads = sorted(((d, rows[-1].seq, bytes.fromhex(rows[-1].row_hash),
                         rows[0].chain_created_at or rows[0].decided_at)
                        for d, rows in self.chains().items()), key=lambda h: h[0].bytes)
        root = merkle_root([head_leaf(d, seq, h) for d, seq, h, _ in heads])
        cid = len(self.checkpoints) + 1
        prev = self.checkpoints[-1].checkpoint_hash if self.checkpoints else AUDIT_GENESIS
        kept = sorted(self.retention, key=lambda r: (r.partition_name, r.action))
        cp = Checkpoint(
            checkpoint_id=cid, created_at=self.now, head_count=len(heads), heads_root=root,
            prev_checkpoint_hash=prev,
            checkpoint_hash=checkpoint_hash(cid, len(heads), root, prev),
            retention_count=len(kept),
            retention_hash=retention_hash([(r.partition_name, r.action, r.range_from,
                                            r.range_to, r.row_count) for r in kept]),
            retention_covered=tuple(r.key for r in kept))
        if sign is not None:
            cp = replace(cp, signature=sign(cp))
        before = {h[0]: h for h in self.sealed_at(cid - 1)}
        now = {h[0] for h in heads}
        self.checkpoints.append(cp)
        self.heads[cid] = [h for h in heads if before.get(h[0]) != h]
        self.removed[cid] = [d for d in before if d not in now]
        return cp


@dataclass
class FakeCheckpointSnapshot:
    """The CheckpointSnapshot port over a FakeCheckpointStore as it is when read."""

    store: FakeCheckpointStore
    sealed_current: bool = False

    def checkpoints(self) -> list[Checkpoint]:
        return list(self.store.checkpoints)

    def _heads(self, checkpoint_id: int, *, current: bool) -> list[SealedHead]:
        chains = self.store.chains()
        out = []
        for d, seq, sealed, created in self.store.sealed_at(checkpoint_id):
            rows = [r for r in chains.get(d, []) if r.seq == seq]
            now = bytes.fromhex(rows[0].row_hash) if rows and current else None
            out.append(SealedHead(d, seq, sealed, created, now))
        return out

    def sealed_heads(self, checkpoint_id: int) -> list[SealedHead]:
        return self._heads(checkpoint_id, current=True)

    def checkpoint(self, checkpoint_id: object) -> Checkpoint | None:
        found = [c for c in self.store.checkpoints if str(c.checkpoint_id) == str(checkpoint_id)]
        return found[0] if found else None

    def stored_heads(self, checkpoint_id: int) -> list[SealedHead]:
        return self._heads(checkpoint_id, current=False)

    def projection_mismatches(self, dispute_id: UUID | None) -> list[tuple[UUID, str]]:
        return [(d, why) for d, why in self.store.projection_mismatch.items()
                if dispute_id is None or d == dispute_id]

    def retention_records(self) -> list[RetentionRecord]:
        return sorted(self.store.retention, key=lambda r: (r.partition_name, r.action))

    def ledger_tables(self) -> dict[str, bool]:
        return dict(self.store.tables)

    def database_now(self) -> datetime:
        return self.store.now

    def ledger_counts(self, dispute_id: UUID | None) -> tuple[int, int]:
        rows = [r for r in self.store.log.ledger if dispute_id in (None, r.dispute_id)]
        return len({r.dispute_id for r in rows}), len(rows)

    def changed_since(self, checkpoint_id: int) -> ChangedChains:
        sealed = {d: (seq, h) for d, seq, h, _ in self.store.sealed_at(checkpoint_id)}
        chains = self.store.chains()
        changed = [d for d, rows in chains.items()
                   if sealed.get(d) != (rows[-1].seq, bytes.fromhex(rows[-1].row_hash))]
        changed += [d for d in sealed if d not in chains]  # a sealed chain gone
        broken: list[tuple[UUID, int]] = []
        mismatches: list[tuple[UUID, int]] = []
        projection: list[tuple[UUID, str]] = []
        read = 0
        for d in changed:
            rows = chains.get(d, [])
            read += len(rows)
            bad = first_bad_seq(rows)
            if bad is not None:
                broken.append((d, bad))
            if d in sealed:
                seq, h = sealed[d]
                at = [r for r in rows if r.seq == seq]
                if not at or bytes.fromhex(at[0].row_hash) != h:
                    mismatches.append((d, seq))
            projection += self.projection_mismatches(d)
        return ChangedChains(broken, mismatches, projection, len(changed), read)

    def seal_current_heads(self) -> None:
        self.sealed_current = True


@dataclass
class FakeCaseFileSources:
    """The CaseFileSources port (service_layer.case_file) on dicts: ``ladder_files`` by
    ``(ladder, version)`` (absent: the deployment no longer has the file) and the calendars
    files."""

    ladder_files: dict[tuple[str, int], EvidenceFile] = field(default_factory=dict)
    calendars: list[EvidenceFile] = field(default_factory=list)

    def ladder_file(self, ladder: str, version: int) -> EvidenceFile | None:
        return self.ladder_files.get((ladder, version))

    def calendar_files(self) -> list[EvidenceFile]:
        return list(self.calendars)


@dataclass
class FakeReviewStreams:
    """The ReviewStreams port on one shard, over a FakeScheduler (its clock and ``review``
    list: the stream, entry id = index + 1) and a FakeDeadLetterQueue (dead letters).

    Per consumer group: ``cursor`` (entries read so far) and ``pending`` (entry id ->
    (consumer, delivered ms), the PEL). Retries: ``retries`` (member -> (at ms, record
    JSON)), leased by a claim until ``at ms = now + lease``. ``counts``: delivery outcomes."""

    scheduler: FakeScheduler
    dead: FakeDeadLetterQueue
    cursor: dict[str, int] = field(default_factory=dict)
    pending: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)
    retries: dict[str, tuple[int, str]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def now_ms(self) -> int:
        return to_ms(self.scheduler.now)

    def review_shards(self) -> range:
        return range(1)

    def ensure_review_group(self, shard: int, group: str) -> None:
        self.cursor.setdefault(group, 0)
        self.pending.setdefault(group, {})

    def _entry(self, entry_id: str) -> dict[str, str]:
        return dict(self.scheduler.review[int(entry_id) - 1])

    def review_autoclaim(self, shard: int, group: str, consumer: str, idle_ms: int,
                         count: int) -> list[tuple[str, dict[str, str] | None]]:
        now, pel = self.now_ms(), self.pending[group]
        idle = [e for e, (_, at) in sorted(pel.items(), key=lambda kv: int(kv[0]))
                if now - at >= idle_ms][:count]
        for entry_id in idle:
            pel[entry_id] = (consumer, now)
        return [(e, self._entry(e)) for e in idle]

    def review_read(self, shard: int, group: str, consumer: str, count: int,
                    block_ms: int | None) -> list[tuple[str, dict[str, str]]]:
        start = self.cursor[group]
        ids = [str(n) for n in range(start + 1, min(len(self.scheduler.review), start + count)
                                     + 1)]
        self.cursor[group] = start + len(ids)
        for entry_id in ids:
            self.pending[group][entry_id] = (consumer, self.now_ms())
        return [(e, self._entry(e)) for e in ids]

    def review_ack(self, shard: int, group: str, entry_id: str) -> None:
        self.pending[group].pop(entry_id, None)

    def notify_claim_retries(self, shard: int, count: int, lease_ms: int
                             ) -> list[tuple[str, str]]:
        now = self.now_ms()
        due = sorted((at, m) for m, (at, _) in self.retries.items() if at <= now)[:count]
        out = []
        for _, member in due:
            record = self.retries[member][1]
            self.retries[member] = (now + lease_ms, record)
            out.append((member, record))
        return out

    def notify_retry_done(self, shard: int, member: str) -> None:
        self.retries.pop(member, None)

    def notify_retry_waiting(self, shard: int) -> list[tuple[str, int]]:
        return sorted(((m, at) for m, (at, _) in self.retries.items()), key=lambda r: r[1])

    def notify_defer(self, shard: int, retry: NotifyRetry) -> None:
        if retry.entry_id:
            self.review_ack(shard, retry.group, retry.entry_id)
        self.retries[retry.member] = (retry.at_ms, retry.record_json)

    def dead_letter_notify(self, shard: int, member: str, record_json: str) -> int:
        self.retries.pop(member, None)
        self.dead.add_notification(member, self.now_ms(), json.loads(record_json))
        return self.now_ms()

    def count_notification(self, shard: int, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1



@dataclass
class FakeLedgerReports:
    """The LedgerReports port over a FakeAuditLog: every dispute's rows (by dispute, then
    seq) with the columns ``sla_rows`` gives, ``now_at`` the database clock. (The adapter
    keeps only disputes active in the window; ``sla_report.compute`` counts by instants, so
    the extra chains change nothing.)"""

    log: FakeAuditLog
    now_at: datetime

    def _rows(self, rows: Iterable[LedgerRow]) -> list[dict[str, Any]]:
        out = []
        for r in rows:
            row: dict[str, Any] = {
                "dispute_id": r.dispute_id, "seq": r.seq, "event": r.event,
                "from_tier": r.from_tier, "to_tier": r.to_tier, "ladder": r.ladder,
                "due_at": r.due_at, "decided_at": r.decided_at,
                "regulatory_deadline": None, "ladder_version": r.ladder_version,
                "external_id": r.external_id}
            if r.seq == 1:
                state = self.log.states.get(r.dispute_id)
                row.update(enq_details=dict(r.details),
                           details_entered_at=r.details.get("entered_tier_at"),
                           state_entered_tier_at=None if state is None
                           else state.entered_tier_at)
            out.append(row)
        return out

    def sla_rows(self, since: datetime, until: datetime
                 ) -> tuple[datetime, list[dict[str, Any]]]:
        ordered = sorted(self.log.ledger, key=lambda r: (str(r.dispute_id), r.seq))
        return self.now_at, self._rows(ordered)

    def dispute_rows(self, dispute_id: UUID) -> tuple[datetime, list[dict[str, Any]]]:
        return self.now_at, self._rows(self.log.trail(dispute_id))


@dataclass
class FakeRollupStore:
    """The RollupStore port (service_layer.sla_rollup) over a FakeLedgerReports: the report
    rows of a dispute are ``reports``' rows of its chain, a row's recorded_at is its
    ``decided_at`` (the fake ledger has no database clock), ``horizon_at``/``now_at`` the
    horizon and database clock. ``rows``: the rollup rows by dispute; ``fail_on_replace``:
    the call number (1-based) of :meth:`replace` that raises (an interrupted refresh);
    ``hours_recounted``: how many finished refreshes asked for the counts kept beside the
    rows to be recounted (after a backfill). The figures, durations, outcomes and
    deadline pages aggregate in PostgreSQL (percentiles, buckets, keyset pages) and are
    tested there
    (tests/integration/test_sla_rollup.py): here they raise."""

    reports: FakeLedgerReports
    horizon_at: datetime
    now_at: datetime
    rows: dict[UUID, list[tuple[Any, ...]]] = field(default_factory=dict)
    st: tuple[datetime, datetime, int, UUID | None] | None = None
    replaced: list[list[UUID]] = field(default_factory=list)
    fail_on_replace: int = 0
    hours_recounted: int = 0

    def state(self) -> tuple[datetime, datetime, int, UUID | None] | None:
        return self.st

    def horizon(self) -> datetime:
        return self.horizon_at

    def db_now(self) -> datetime:
        return self.now_at

    def _ids(self) -> list[UUID]:
        return sorted({r.dispute_id for r in self.reports.log.ledger})

    def changed_since(self, since: datetime, upto: datetime,
                      chunk: int) -> Iterator[list[UUID]]:
        ids = sorted({r.dispute_id for r in self.reports.log.ledger
                      if since <= r.decided_at < upto})
        for i in range(0, len(ids), chunk):
            yield ids[i:i + chunk]

    def every_dispute(self, chunk: int,
                      after: UUID | None = None) -> Generator[list[UUID], None, None]:
        ids = [d for d in self._ids() if after is None or d > after]
        for i in range(0, len(ids), chunk):
            yield ids[i:i + chunk]

    def open_deadlines_before(self, until: datetime,
                              missed_at: datetime | None = None) -> list[UUID]:
        return sorted(d for d, rows in self.rows.items()
                      if any(r[0] == "deadline" and r[5] in ("at_risk", "pending")
                             and r[3] <= until and (missed_at is None or r[5] == "pending"
                                                    or r[3] <= missed_at) for r in rows))

    def chains(self, ids: Sequence[UUID]) -> list[dict[str, Any]]:
        wanted = set(ids)
        chain = sorted((r for r in self.reports.log.ledger if r.dispute_id in wanted),
                       key=lambda r: (r.dispute_id, r.seq))
        return self.reports._rows(chain)

    def replace(self, ids: Sequence[UUID], rows: Sequence[tuple[Any, ...]],
                backfill_after: UUID | None = None) -> None:
        if len(self.replaced) + 1 == self.fail_on_replace:
            raise RuntimeError("the refresh's transaction failed")
        self.replaced.append(list(ids))
        for d in ids:
            self.rows[d] = [tuple(r[1:]) for r in rows if r[0] == d]
        if backfill_after is not None and self.st is not None:
            self.st = (*self.st[:3], backfill_after)

    def begin_backfill(self, watermark: datetime, computed_at: datetime,
                       grace_s: int) -> None:
        self.rows.clear()
        self.st = (watermark, computed_at, grace_s, UUID(int=0))

    def set_state(self, watermark: datetime, computed_at: datetime, grace_s: int,
                  recount_hours: bool = False) -> None:
        self.st = (watermark, computed_at, grace_s, None)
        self.hours_recounted += recount_hours

    def figures(self, since: datetime, until: datetime) -> list[dict[str, Any]]:
        raise NotImplementedError("aggregated in PostgreSQL: tests/integration")

    def deadlines(self, since: datetime, until: datetime, state: str | None,
                  page: int) -> Iterator[list[tuple[UUID, str, datetime]]]:
        raise NotImplementedError("paged in PostgreSQL: tests/integration")

    def durations(self, since: datetime, until: datetime,
                  uppers: Sequence[float]) -> list[tuple[str, str, int, int]]:
        raise NotImplementedError("aggregated in PostgreSQL: tests/integration")

    def outcomes(self, bounds: Sequence[datetime]) -> list[dict[str, Any]]:
        raise NotImplementedError("aggregated in PostgreSQL: tests/integration")


@dataclass
class FakeWarningQueue:
    """The WarningQueue port (warnings ZSET, ``warn_claim.lua``) on a dict, over a
    FakeScheduler's clock: ``members`` (member text -> due epoch ms). :meth:`schedule` adds
    a member unless present (ZADD NX); :meth:`claim` takes the due ones earliest first, each
    once (ZREM in the script), and leaves ``next_due_ms`` = the earliest left, or now when
    a full batch may leave more due."""

    scheduler: FakeScheduler
    members: dict[str, int] = field(default_factory=dict)
    next_due_ms: int | None = None
    namespace: str = "fake"
    shards: int = 1

    def schedule(self, members: Sequence[WarningMember]) -> int:
        return self.schedule_members([(m.member, m.due_ms) for m in members])

    def schedule_members(self, members: Sequence[tuple[str, int]]) -> int:
        added = 0
        for member, due_ms in members:
            if member not in self.members:
                self.members[member] = due_ms
                added += 1
        return added

    def claim(self, max_items: int) -> tuple[datetime, list[WarningMember]]:
        if not 1 <= max_items <= 1000:
            raise InvalidInput(f"max_items must be 1..1000, got {max_items}")
        now_ms = to_ms(self.scheduler.now)
        due = sorted((ms, m) for m, ms in self.members.items() if ms <= now_ms)[:max_items]
        for _, member in due:
            del self.members[member]
        left = min(self.members.values(), default=None)
        self.next_due_ms = now_ms if len(due) >= max_items else left
        return self.scheduler.now, [WarningMember.parse(m, ms) for ms, m in due]


@dataclass
class FakeResyncMark:
    """The ResyncMark port on one optional dict (``mark``), over a FakeScheduler's clock."""

    scheduler: FakeScheduler
    mark: dict[str, Any] | None = None

    def resync(self) -> dict[str, Any] | None:
        return None if self.mark is None else dict(self.mark)

    def mark_resync(self, reason: str, detail: str = "") -> None:
        if self.mark is None:
            self.mark = {"reason": reason, "since_ms": to_ms(self.scheduler.now),
                         "detail": detail}

    def clear_resync(self) -> bool:
        found, self.mark = self.mark is not None, None
        return found


@dataclass
class FakeDoctorStore:
    """The DoctorStore port (service_layer.doctor) over a FakeAuditLog: a dispute decided
    twice out of one tier has two PROMOTED/TERMINAL rows with the same ``from_tier`` and
    ``ladder_version`` (the adapter's query); counts by the projection's status."""

    log: FakeAuditLog

    def duplicate_decisions(self) -> int:
        seen: dict[tuple[UUID, str | None, int], int] = {}
        for r in self.log.ledger:
            if r.event in ("PROMOTED", "TERMINAL"):
                key = (r.dispute_id, r.from_tier, r.ladder_version)
                seen[key] = seen.get(key, 0) + 1
        return len({key[0] for key, n in seen.items() if n > 1})

    def counts(self) -> dict[str, dict[str, int]]:
        by: dict[str, int] = {}
        for esc in self.log.states.values():
            by[esc.status.value] = by.get(esc.status.value, 0) + 1
        return {"by_status": by}

    def get_many(self, dispute_ids: Iterable[UUID]) -> dict[UUID, Escalation]:
        return self.log.get_many(dispute_ids)


@dataclass
class FakeDoctorRedis:
    """The DoctorRedis port (service_layer.doctor) over a FakeScheduler (one shard, no
    ready ZSET: ``ready_count`` is 0) and a FakeDeadLetterQueue. A member without payload
    is a score whose ``payloads`` entry is gone."""

    scheduler: FakeScheduler
    dead: FakeDeadLetterQueue

    def members_without_payload(self) -> list[str]:
        return sorted(m for m in self.scheduler.scores if m not in self.scheduler.payloads)

    def scan_shards(self, count: int = 1000) -> Iterator[list[list[tuple[str, int]]]]:
        members = sorted(self.scheduler.scores.items())
        yield [members[i:i + count] for i in range(0, len(members), count)]

    def dead_list(self, limit: int = 100) -> list[tuple[str, int, dict[str, Any]]]:
        return self.dead.dead_list(limit)

    def ready_count(self) -> int:
        return 0

    def inspect(self, dispute_ids: list[str]) -> dict[str, MemberState]:
        out = {}
        for m in dispute_ids:
            esc = self.scheduler.payloads.get(m)
            out[m] = MemberState(None if esc is None else esc.seq,
                                 self.scheduler.scores.get(m), m in self.scheduler.locks,
                                 f"{DEAD_DECISION}{m}" in self.dead.dead)
        return out


@dataclass
class FakeServerProbe:
    """The ServerProbe port (service_layer.doctor) with set answers: ``redis_ms`` /
    ``db_ms`` (the two clocks), ``policy`` (None = INFO and CONFIG refused) and
    ``replica`` (None = pg_stat_replication not readable)."""

    redis_ms: int
    db_ms: int
    policy: str | None = "noeviction"
    replica: dict[str, Any] | None = field(default_factory=lambda: {
        "in_recovery": False, "synchronous_standby_names": "", "standbys": []})

    def clocks_ms(self) -> tuple[int, int]:
        return self.redis_ms, self.db_ms

    def maxmemory_policy(self) -> str | None:
        return self.policy

    def replication(self) -> dict[str, Any] | None:
        return None if self.replica is None else dict(self.replica)


@dataclass
class FakeConsoleQueries:
    """The ConsoleQueries port (service_layer.deadline_outcomes) over a FakeAuditLog: a
    dispute's chain is its ledger rows (``ChainEvent`` with actor and details) and its
    clocks the projection's ``deadlines``; ``now_at`` is the database clock. Ended =
    resolved or cancelled. The keyset pages and counts (``clock_keys``, ``clock_count``,
    ``tier_counts``, ``pending_page``, ``pending_total``) are PostgreSQL's and tested there
    (tests/integration): here they raise."""

    log: FakeAuditLog
    now_at: datetime

    def now(self) -> datetime:
        return self.now_at

    def _chain(self, esc: Escalation) -> DeadlineChain:
        events = tuple(ChainEvent(r.seq, r.event, r.decided_at, r.from_tier, r.to_tier,
                                  r.actor, dict(r.details))
                       for r in self.log.trail(esc.dispute_id))
        return DeadlineChain(esc.dispute_id, esc.external_id, esc.ladder, esc.ladder_version,
                             tuple(esc.deadlines), events, esc.institution_tz,
                             esc.institution_calendar)

    def deadline_chains(self, since: datetime | None = None, until: datetime | None = None,
                        dispute_id: UUID | None = None) -> list[DeadlineChain]:
        return [self._chain(e) for e in self.log.states.values()
                if (dispute_id is None or e.dispute_id == dispute_id)
                and any((since is None or at >= since) and (until is None or at < until)
                        for _, at in e.deadlines) and e.deadlines]

    def open_miss_chains(self, now: datetime, closed_by_resolution: Sequence[tuple[str, int]],
                         ) -> list[DeadlineChain]:
        closed = set(closed_by_resolution)
        ended = (Status.RESOLVED, Status.CANCELLED)
        return [self._chain(e) for e in self.log.states.values()
                if any(at <= now for _, at in e.deadlines)
                and not (e.status in ended and (e.ladder, e.ladder_version) in closed)]

    def pending(self) -> list[PendingEscalation]:
        rows = [e for e in self.log.states.values() if e.status is Status.PENDING]
        return [PendingEscalation(e.dispute_id, e.external_id, e.ladder, e.ladder_version,
                                  e.tier, e.due_at, e.entered_tier_at)
                for e in sorted(rows, key=lambda e: e.due_at)]

    def chains_of(self, dispute_ids: Sequence[UUID]) -> list[DeadlineChain]:
        return [self._chain(self.log.states[d]) for d in dispute_ids if d in self.log.states]

    def clock_keys(self, now: datetime, flt: ClockFilter, after: ClockKey | None, limit: int,
                   descending: bool = False) -> list[ClockKey]:
        raise NotImplementedError("keyset pages in PostgreSQL: tests/integration")

    def clock_count(self, now: datetime, flt: ClockFilter, cap: int) -> int:
        raise NotImplementedError("counted in PostgreSQL: tests/integration")

    def tier_counts(self, now: datetime) -> list[TierCount]:
        raise NotImplementedError("counted in PostgreSQL: tests/integration")

    def pending_page(self, now: datetime, flt: PendingFilter, after: tuple[str, ...] | None,
                     limit: int) -> list[tuple[PendingEscalation, tuple[str, ...]]]:
        raise NotImplementedError("keyset pages in PostgreSQL: tests/integration")

    def pending_total(self, now: datetime, flt: PendingFilter) -> int:
        raise NotImplementedError("counted in PostgreSQL: tests/integration")


class InlineHelper:
    """A ``core.HelperProcess`` that runs the job in this process, at once, when started
    (the edge's ``ForkedHelper`` runs it in a forked child): the messages it sent are then
    given in order, its exception (if any) raised after them.

    ``ends_after``: give only that many messages, then end as a helper process that died
    does (``RuntimeError``, the adapter's message). ``sent`` keeps every message of the last
    job; ``read_all`` says whether the caller read them to their end.
    """

    def __init__(self, ends_after: int | None = None) -> None:
        self.ends_after = ends_after
        self.sent: list[object] = []
        self.read_all = False

    @contextmanager
    def start(self, job: Callable[[Callable[[object], None]], None]
              ) -> Generator[Iterator[object], None, None]:
        """Run ``job`` now; the context gives its messages."""
        self.sent, self.read_all = [], False
        error: BaseException | None = None
        try:
            job(self.sent.append)
        except Exception as exc:  # the helper's failure reaches its caller
            error = exc

        def messages() -> Iterator[object]:
            for n, message in enumerate(self.sent):
                if self.ends_after is not None and n >= self.ends_after:
                    raise RuntimeError("the helper process ended without its results")
                yield message
            if error is not None:
                raise error
            self.read_all = True

        yield messages()


def _implements(scheduler: FakeScheduler, log: FakeAuditLog, ladders: FakeLadders,
                tokens: FakeTokenStore, sessions: FakeSessionStore, search: FakeLedgerSearch,
                dead: FakeDeadLetterQueue, lease: FakeLease, runs: FakeMaintenanceRuns,
                streams: FakeReviewStreams, reports: FakeLedgerReports,
                history: FakeLadderHistory, checkpoints: FakeCheckpointStore,
                snapshot: FakeCheckpointSnapshot, sources: FakeCaseFileSources,
                rollup: FakeRollupStore, warnings: FakeWarningQueue,
                resync: FakeResyncMark, doctor_store: FakeDoctorStore,
                doctor_redis: FakeDoctorRedis, probe: FakeServerProbe,
                console: FakeConsoleQueries,
                ) -> tuple[Scheduler, AuditLog, EventLog, LadderSource, TokenStore,
                           SessionStore, LedgerSearch, DeadLetterQueue, Lease,
                           MaintenanceRuns, ReviewStreams, LedgerReports, LadderHistory,
                           CheckpointStore, CheckpointSnapshot, CaseFileSources,
                           RollupStore, WarningQueue, ResyncMark, DoctorStore, DoctorRedis,
                           ServerProbe, ConsoleQueries]:
    """Never called: mypy checks here that each fake implements its port's Protocol."""
    return (scheduler, log, log, ladders, tokens, sessions, search, dead, lease, runs,
            streams, reports, history, checkpoints, snapshot, sources, rollup, warnings,
            resync, doctor_store, doctor_redis, probe, console)
