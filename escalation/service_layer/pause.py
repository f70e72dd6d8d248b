"""Use cases: pause and resume an escalation's SLA clock (docs/sla.md "Pause / resume"), e.g.
while waiting for the cardholder.

* ``pause``: records PAUSED (the remaining window, in ms, kept in the tier's calendar basis:
  open time for business units, elapsed time otherwise; ``sla_timing.remaining_ms``) with a
  compare-and-set on the dispute's seq, then applies PARK to Redis (member off the ZSET,
  payload kept with the new seq).
* ``resume``: records RESUMED with ``due = now + remaining`` counted in the tier's calendar
  (capped by the regulatory deadline minus its buffer), then re-schedules the member.

Both use Redis ``TIME`` as the clock (ADR 0005), PostgreSQL first, Redis second (PostgreSQL is
the system of record, docs/architecture.md "Where the truth lives"). The Redis
step is owner-less (guarded by seq only); a worker holding the lock at that moment records
STALE (the projection is paused / at a newer seq) and applies the PostgreSQL state itself.
Cancelling a paused escalation is the ordinary ``cancel`` (its script removes the payload).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from escalation.domain.calendars import CalendarRegistry
from escalation.domain.errors import ConflictError, NotFound
from escalation.domain.escalation import Escalation, Status, check_reason, parse_dispute_id
from escalation.domain.sla_timing import (
    DueCap,
    active_ms_between,
    calendar_of,
    cap_due,
    cap_provenance,
    deadline_values,
    escalation_tier_cap,
    remaining_ms,
    resume_due,
    tier_window,
    uses_open_time,
)
from escalation.ports import (
    ApplyAction,
    ApplyOp,
    ApplyOutcome,
    EventLog,
    LadderSource,
    LedgerEvent,
    Scheduler,
)

CAS_RETRIES = 5  # a worker may record a promotion between our read and our append
APPLY_RETRIES = 5
APPLY_RETRY_SLEEP_S = 0.05


PauseStore = EventLog  # ports.EventLog: get, trail, append_event


@dataclass(frozen=True, slots=True)
class PauseResult:
    """State after pause/resume; ``remaining_ms`` = window left (open or elapsed ms)."""

    escalation: Escalation
    remaining_ms: int
    basis: str  # "open" (business units) or "elapsed"
    redis: ApplyOutcome
    consumed_ms: int | None = None
    """Active (unpaused) SLA time of the tier already used (same basis); None when the
    PAUSED row predates it being recorded."""
    at: datetime | None = None
    """Redis TIME of the pause / resume."""


def _current(store: PauseStore, did: UUID) -> tuple[Escalation, Status]:
    got = store.get(did)
    if got is None:
        raise NotFound(f"no escalation recorded for dispute {did}")
    return got


def _apply_owner_less(scheduler: Scheduler, op: ApplyOp) -> ApplyOutcome:
    """Apply ``op`` without a token; MISSING payload -> restore; brief retries on NOT_OWNER."""
    outcome = ApplyOutcome.NOT_OWNER
    for _ in range(APPLY_RETRIES):
        outcome = scheduler.apply([op])[0]
        if outcome is ApplyOutcome.MISSING:
            outcome = scheduler.restore([op.escalation])[0]
        if outcome is not ApplyOutcome.NOT_OWNER:
            return outcome
        time.sleep(APPLY_RETRY_SLEEP_S)
    # A worker still holds the lock: its record step finds the new seq (STALE) and applies
    # the PostgreSQL state itself, so the change still reaches Redis.
    return outcome


@dataclass(frozen=True, slots=True)
class PausePorts:
    """The ports of :func:`pause` and :func:`resume`: ``scheduler`` (Redis TIME is their
    clock), ``store`` (the dispute's state and trail, and the PAUSED / RESUMED appends), the
    released ``ladders`` and the ``calendars`` SLA windows count in."""

    scheduler: Scheduler
    store: PauseStore
    ladders: LadderSource
    calendars: CalendarRegistry


@dataclass(frozen=True, slots=True)
class PauseClock:
    """Pause one dispute's SLA clock (the command of :func:`pause`): ``dispute_id`` (a UUID or
    its text), who pauses (``actor``, on record) and why (``reason``: 1-500 characters, no
    control characters; ``check_reason``)."""

    dispute_id: object
    actor: str
    reason: str


@dataclass(frozen=True, slots=True)
class ResumeClock:
    """Resume one dispute's SLA clock (the command of :func:`resume`): ``dispute_id`` (a UUID
    or its text) and who resumes (``actor``, on record)."""

    dispute_id: object
    actor: str


def pause(cmd: PauseClock, ports: PausePorts) -> PauseResult:
    """Pause a pending escalation's clock.

    Returns:
        PauseResult with the paused state (status PAUSED, seq + 1) and the remaining window.

    Raises:
        InvalidInput: ``dispute_id`` is not a UUID; ``reason`` is blank, longer than 500
            characters or holds a control character (NUL, newline...).
        NotFound: no escalation for the dispute.
        ConflictError: already paused ("already paused"), terminal or cancelled, or the seq
            kept moving under concurrent firing (after ``CAS_RETRIES`` attempts).
    """
    scheduler, store, ladders = ports.scheduler, ports.store, ports.ladders
    actor, reason = cmd.actor, cmd.reason
    did = parse_dispute_id(cmd.dispute_id)
    check_reason(reason)
    for _ in range(CAS_RETRIES):
        esc, status = _current(store, did)
        if status is Status.PAUSED:
            raise ConflictError(f"dispute {did} is already paused; resume it first")
        if status is not Status.PENDING:
            raise ConflictError(f"dispute {did} is {status.value}; only a pending escalation "
                                "can be paused")
        ladder = ladders.get(esc.ladder, esc.ladder_version)
        window = tier_window(ladder, esc.tier, esc.materiality.amount)
        cal = calendar_of(window, esc.calendars(ports.calendars))
        now = scheduler.time()
        left = remaining_ms(window, cal, now, esc.due_at)
        basis = "open" if uses_open_time(window) else "elapsed"
        started, before = _clock_started(store, esc)
        consumed = before + active_ms_between(window, cal, started, now)
        try:
            state = store.append_event(LedgerEvent(
                did, "PAUSED", "PAUSED", actor, now,
                {"status": Status.PAUSED, "remaining_ms": left},
                {"reason": reason, "remaining_ms": left, "basis": basis,
                 "consumed_ms": consumed,
                 "calendar": cal.id, "paused_due_at": esc.due_at.isoformat()},
                expected_seq=esc.seq, calendar_version=cal.version))
        except ConflictError:
            continue
        outcome = _apply_owner_less(scheduler, ApplyOp(state, ApplyAction.PARK))
        return PauseResult(state, left, basis, outcome, consumed, now)
    raise ConflictError(f"dispute {did}: state kept changing; pause not recorded, try again")


def _last_paused(store: PauseStore, did: UUID) -> dict[str, Any]:
    """The ``details`` of the dispute's last PAUSED ledger row. Raises ConflictError if none."""
    for row in reversed(store.trail(did)):
        if row.event == "PAUSED":
            return dict(row.details)
    raise ConflictError(f"dispute {did} has no PAUSED ledger row")


def _remaining_from_trail(store: PauseStore, did: UUID) -> tuple[int, int | None]:
    """(remaining ms, consumed ms or None) recorded by the last PAUSED row."""
    details = _last_paused(store, did)
    consumed = details.get("consumed_ms")
    return int(details.get("remaining_ms", 0)), None if consumed is None else int(consumed)


def paused_remaining(store: PauseStore, did: UUID) -> tuple[int, str | None]:
    """(remaining ms, basis ``open``/``elapsed`` or None) of a paused escalation, as its last
    PAUSED ledger row recorded them. Raises ConflictError if it has no PAUSED row."""
    details = _last_paused(store, did)
    basis = details.get("basis")
    return int(details.get("remaining_ms", 0)), None if basis is None else str(basis)


TIER_ENTRY_EVENTS = frozenset({"ENQUEUED", "PROMOTED", "LADDER_MIGRATED"})


def _clock_started(store: PauseStore, esc: Escalation) -> tuple[datetime, int]:
    """(instant the tier's SLA clock last started, active ms used before it): the last
    RESUMED row of the current tier (with its ``consumed_ms``), else the tier entry."""
    for row in reversed(store.trail(esc.dispute_id)):
        if row.event == "RESUMED" and row.details.get("consumed_ms") is not None:
            return row.decided_at, int(row.details["consumed_ms"])
        if row.event in TIER_ENTRY_EVENTS or row.event == "RESUMED":
            break
    return esc.entered_tier_at, 0


def resume(cmd: ResumeClock, ports: PausePorts) -> PauseResult:
    """Resume a paused escalation: due = now + remaining, counted in the tier's calendar.

    Returns:
        PauseResult with the pending state (new due time, seq + 1).

    Raises:
        InvalidInput: ``dispute_id`` is not a UUID.
        NotFound: no escalation for the dispute.
        ConflictError: the escalation is not paused (pending, terminal or cancelled).
    """
    scheduler, store, ladders = ports.scheduler, ports.store, ports.ladders
    actor = cmd.actor
    did = parse_dispute_id(cmd.dispute_id)
    for _ in range(CAS_RETRIES):
        esc, status = _current(store, did)
        if status is not Status.PAUSED:
            raise ConflictError(f"dispute {did} is {status.value}, not paused; nothing to resume")
        ladder = ladders.get(esc.ladder, esc.ladder_version)
        window = tier_window(ladder, esc.tier, esc.materiality.amount)
        scoped = esc.calendars(ports.calendars)
        cal = calendar_of(window, scoped)
        left, consumed = _remaining_from_trail(store, did)
        now = scheduler.time()
        due = resume_due(window, cal, now, left)
        cap, capping = escalation_tier_cap(
            ladder, esc.tier, esc.deadlines, esc.regulatory_deadline, scoped)
        uncapped = due
        due = cap_due(due, cap, now)
        prov = cap_provenance(
            ladder, esc.tier,
            deadline_values(ladder, esc.deadlines, esc.regulatory_deadline), scoped,
            DueCap(uncapped, due, at=capping)) if ladder.deadlines else None
        basis = "open" if uses_open_time(window) else "elapsed"
        try:
            state = store.append_event(LedgerEvent(
                did, "RESUMED", "RESUMED", actor, now,
                {"status": Status.PENDING, "due_at": due, "remaining_ms": None},
                {"remaining_ms": left, "basis": basis, "calendar": cal.id,
                 **({"consumed_ms": consumed, "window_ms": consumed + left}
                    if consumed is not None else {}),
                 **({"deadline": prov} if prov is not None else {})},
                expected_seq=esc.seq, calendar_version=cal.version))
        except ConflictError:
            continue
        outcome = _apply_owner_less(scheduler, ApplyOp(state, ApplyAction.RESCHEDULE))
        return PauseResult(state, left, basis, outcome, consumed, now)
    raise ConflictError(f"dispute {did}: state kept changing; resume not recorded, try again")
