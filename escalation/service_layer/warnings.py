"""Use case: pre-breach warnings (docs/sla.md "Warnings before breach"), e.g. at 50 % and 75 %
of a tier's window.

* **schedule** (``schedule_warnings``): when a tier is scheduled (enqueue, promotion, resume),
  one member per ``warn_at`` fraction of the tier goes into the shard's warnings ZSET, keyed by
  the tier-entry seq: ``"<id>:<seq>:<fraction>"`` at ``entered + f * window``
  (``sla_timing.warning_times``). Warnings at or after the breach are not scheduled.
* **fire** (``fire_warnings``, called by the worker after a ``fire_due`` batch when the
  earliest warning left by the previous pass (``WarningReport.next_due_ms``) is due, or after
  a wake marker; ``RedisWarnings.schedule`` pushes the marker when it adds a new earliest
  warning, so caching that time never makes a warning late; docs/performance.md): claim due
  members (``warn_claim.lua``), then per member:
  - drop it if the escalation *moved on*: not pending, or a ledger row other than a WARNING
    or an action that left the due time alone was appended after the tier-entry seq
    (promotion, pause, resume, migration, cancel, an action that re-planned the due time);
  - drop it if a WARNING row for the same (dispute, tier seq, fraction) exists;
  - else append a WARNING ledger row with ``expected_seq`` = the projection's seq (a
    concurrent promotion makes it fail: dropped) and re-sync the Redis payload to the new seq
    with an owner-less apply that also XADDs the review-stream entry (idempotency key
    ``<id>:<tier seq>:warn:<fraction>``); apply refuses (STALE_SEQ / MISSING) if Redis has
    moved on meanwhile, so no stream entry is sent then.
  The database enforces "never twice" with a unique index on (dispute_id, tier_seq, fraction)
  of WARNING rows (migration 0004).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from functools import lru_cache
from typing import Any

from escalation.domain.calendars import CalendarRegistry
from escalation.domain.errors import (
    ConflictError,
    DuplicateEvent,
    EscalationError,
    InvalidInput,
    NotFound,
)
from escalation.domain.escalation import Escalation, Status
from escalation.domain.ladder import Ladder
from escalation.domain.sla_timing import (
    ActiveTime,
    active_warning_times,
    calendar_of,
    fraction_label,
    tier_window,
    uses_open_time,
    warning_times,
)
from escalation.domain.timeutil import from_ms, to_ms
from escalation.ports import (
    ApplyAction,
    ApplyOp,
    ApplyOutcome,
    EventLog,
    LadderSource,
    LedgerEvent,
    LedgerRow,
    Scheduler,
    WarningMember,
    WarningQueue,
)

EventSink = Callable[..., None]


WarningStore = EventLog  # ports.EventLog: get, trail, append_event

LATE_AFTER_MS = 60_000
"""A warning recorded more than this after its intended instant is recorded as late (e.g.
scheduled for an escalation enqueued after its warning points, or a worker outage); a
worker's normal poll delay (seconds) stays under it."""


def lateness(intended_ms: int, now: datetime) -> dict[str, object]:
    """Ledger details of a warning recorded at ``now`` that was meant for ``intended_ms``:
    ``intended_at`` (ISO UTC), ``late_by_ms`` (>= 0) and ``late`` (over
    :data:`LATE_AFTER_MS`). A warning is never recorded as on time when it was not."""
    late_by = max(0, to_ms(now) - intended_ms)
    return {"intended_at": from_ms(intended_ms).isoformat(), "late_by_ms": late_by,
            "late": late_by > LATE_AFTER_MS}


@dataclass
class WarningReport:
    """What one :func:`fire_warnings` call did."""

    claimed: int = 0
    recorded: int = 0
    moved_on: int = 0
    duplicate: int = 0
    notified: int = 0
    unresolvable: int = 0
    """Warnings dropped because the escalation's pinned ladder version cannot be read now (a
    released file missing or edited, a tier or calendar it no longer resolves): logged as
    ``escalation.warning_dropped``; the breach itself dead-letters the escalation."""
    recorded_keys: list[str] = field(default_factory=list)
    next_due_ms: int | None = None
    """Earliest warning still scheduled after this pass (epoch ms; None = none): the worker
    runs the next pass only once Redis time reaches it, or after a wake, so an idle worker does not
    poll the warnings ZSET every batch (docs/performance.md, "Idle worker")."""


def warning_members(
    escalations: Sequence[Escalation], ladders: LadderSource, calendars: CalendarRegistry
) -> list[WarningMember]:
    """The warnings to schedule for pending escalations that just entered their tier.

    Uses each tier's ``warn_at`` fractions; skips warnings at or after the due time and
    escalations whose ladder/tier/calendar cannot be resolved (they are logged by decide).
    """
    out: list[WarningMember] = []
    seen: dict[tuple[str, int], Ladder] = {}  # a batch shares a few ladder versions
    for esc in escalations:
        if esc.status is not Status.PENDING:
            continue
        try:
            ladder = seen.get((esc.ladder, esc.ladder_version))
            if ladder is None:
                ladder = seen[(esc.ladder, esc.ladder_version)] = ladders.get(
                    esc.ladder, esc.ladder_version)
            tier = ladder.tier(esc.tier)
            if not tier.warn_at:
                continue
            window = tier_window(ladder, tier.id, esc.materiality.amount)
            if not uses_open_time(window):
                out.extend(_elapsed_members(esc, tier.warn_at))
                continue
            cal = calendar_of(window, esc.calendars(calendars))
            times = warning_times(window, cal, esc.entered_tier_at, esc.due_at, tier.warn_at)
        except EscalationError:
            continue
        for fraction, at in times:
            if at < esc.due_at:
                out.append(WarningMember(esc.dispute_id, esc.seq, fraction_label(fraction),
                                         to_ms(at)))
    return out


_US = timedelta(microseconds=1)


def _elapsed_members(esc: Escalation, fractions: tuple[Decimal, ...]) -> list[WarningMember]:
    """Warnings of a calendar-unit window in integer milliseconds (the worker's hot path).

    Same instants as :func:`warning_times` for elapsed time: ``entered + int(total * f)`` ms,
    with ``f`` as an exact integer ratio (``total * num // den``; total >= 0 so floor equals
    the truncation of ``int(Decimal(total) * f)``).

    Raises:
        InvalidInput: a fraction outside (0, 1).
    """
    entered = to_ms(esc.entered_tier_at)
    span_us = (esc.due_at - esc.entered_tier_at) // _US  # the window, exactly
    total = max(0, span_us // 1000)
    out = []
    for num, den, label in _fraction_plan(fractions):
        offset = total * num // den
        if offset * 1000 < span_us:  # the warning falls before the due time
            out.append(WarningMember(esc.dispute_id, esc.seq, label, entered + offset))
    return out


@lru_cache(maxsize=256)  # one entry per tier's warn_at tuple: a handful
def _fraction_plan(fractions: tuple[Decimal, ...]) -> tuple[tuple[int, int, str], ...]:
    """``(numerator, denominator, label)`` of each warning fraction, checked once.

    Raises:
        InvalidInput: a fraction outside (0, 1) (not cached: raised on every call).
    """
    plan = []
    for f in fractions:
        if not Decimal(0) < f < Decimal(1):
            raise InvalidInput(f"warning fraction must be in (0, 1), got {f}")
        num, den = f.as_integer_ratio()
        plan.append((num, den, fraction_label(f)))
    return tuple(plan)


@dataclass(frozen=True, slots=True)
class ResumedTier:
    """An escalation just resumed (what :func:`resumed_warning_members` plans from).

    ``consumed_ms``: active SLA time of the tier consumed before the pause, milliseconds
    (None: a pause recorded before it was kept); ``remaining_ms``: active time left,
    milliseconds; ``resumed_at``: when it resumed (aware).
    """

    escalation: Escalation
    consumed_ms: int | None
    remaining_ms: int
    resumed_at: datetime


def resumed_warning_members(resumed: ResumedTier, ladders: LadderSource,
                            calendars: CalendarRegistry) -> list[WarningMember]:
    """Warnings of an escalation just resumed, as fractions of **active** SLA time.

    The tier's window is ``consumed_ms + remaining`` of active time; a warning whose point was
    passed before the pause is left out (it was scheduled, and fired or was recorded late, in
    the earlier run). Without ``consumed_ms`` (a pause recorded before it was kept) the
    escalation is treated as freshly entered (:func:`warning_members`).
    """
    esc, consumed_ms = resumed.escalation, resumed.consumed_ms
    remaining, resumed_at = resumed.remaining_ms, resumed.resumed_at
    if consumed_ms is None:
        return warning_members([esc], ladders, calendars)
    try:
        ladder = ladders.get(esc.ladder, esc.ladder_version)
        tier = ladder.tier(esc.tier)
        window = tier_window(ladder, tier.id, esc.materiality.amount)
        cal = calendar_of(window, esc.calendars(calendars))
        times = active_warning_times(window, cal, resumed_at,
                                     ActiveTime(consumed_ms + remaining, consumed_ms),
                                     tier.warn_at)
    except EscalationError:
        return []
    return [WarningMember(esc.dispute_id, esc.seq, fraction_label(f), to_ms(at))
            for f, at in times if at < esc.due_at]


def schedule_warnings(
    escalations: Sequence[Escalation], *, warnings: WarningQueue, ladders: LadderSource,
    calendars: CalendarRegistry,
) -> int:
    """Schedule the warnings of ``escalations`` (see module doc). Returns how many were new."""
    return warnings.schedule(warning_members(escalations, ladders, calendars))


def schedule_ahead(
    escalations: Sequence[Escalation], *, warnings: WarningQueue, ladders: LadderSource,
    calendars: CalendarRegistry, now: datetime,
) -> int:
    """:func:`schedule_warnings` without the warnings whose instant is at or before ``now``
    (a ladder migration re-schedules a tier already running: its earlier warnings belong to
    the earlier run). Returns how many were new."""
    now_ms = to_ms(now)
    members = warning_members(escalations, ladders, calendars)
    return warnings.schedule([m for m in members if m.due_ms > now_ms])


def schedule_resumed(
    result: Any, *, warnings: WarningQueue, ladders: LadderSource, calendars: CalendarRegistry,
) -> int:
    """Schedule the warnings of a ``pause.resume`` result (active-time fractions,
    :func:`resumed_warning_members`). Returns how many were new."""
    members = resumed_warning_members(
        ResumedTier(result.escalation, result.consumed_ms, result.remaining_ms,
                    result.at or result.escalation.entered_tier_at), ladders, calendars)
    return warnings.schedule(members)


def _keeps_clock(row: LedgerRow) -> bool:
    """True for a row after which the tier's warnings still stand: a WARNING, or an action
    that did not move the due time (no ``details.replan``; a re-planned window gets warnings
    of its own, keyed by that row's seq)."""
    return row.event == "WARNING" or (row.event == "ACTION_RECORDED"
                                      and not row.details.get("replan"))


def _moved_on(rows: Sequence[LedgerRow], seq: int, fraction: str) -> tuple[bool, bool]:
    """(moved on, duplicate) for a warning of tier-entry ``seq`` given the dispute's trail."""
    later = [r for r in rows if r.seq > seq]
    if any(not _keeps_clock(r) for r in later):
        return True, False
    dup = any(r.details.get("tier_seq") == seq and r.details.get("fraction") == fraction
              for r in later)
    return False, dup


@dataclass(frozen=True, slots=True)
class FireWarnings:
    """Fire one batch of due pre-breach warnings (the command of :func:`fire_warnings`).

    ``actor``: who records the WARNING rows; ``max_items``: warnings claimed at most.
    """

    actor: str
    max_items: int = 100


@dataclass(frozen=True, slots=True)
class WarningPorts:
    """What :func:`fire_warnings` reads and writes: the warning queue it claims from, the
    scheduler (Redis time), the ledger it records on, the released ladders and calendars."""

    warnings: WarningQueue
    scheduler: Scheduler
    store: WarningStore
    ladders: LadderSource
    calendars: CalendarRegistry


def fire_warnings(cmd: FireWarnings, ports: WarningPorts,
                  emit: EventSink | None = None) -> WarningReport:
    """Claim and record one batch of due warnings (see module doc). Returns a report.

    A warning whose escalation's ladder version cannot be resolved now (a broken release: the
    file missing or edited after release; ``LadderError`` / ``InvalidInput``) is dropped and
    logged (``escalation.warning_dropped``, WARNING), never raised: one broken file must not
    stop a worker that fires every other ladder. The escalation itself is dead-lettered when
    it comes due (docs/reliability.md), and ``dead retry`` brings it back once restored.

    Raises:
        Database / Redis connection errors propagate; claimed warnings are then lost (a
        warning is advisory, at most once; the breach itself still fires).
    """
    warnings, scheduler, store = ports.warnings, ports.scheduler, ports.store
    ladders, calendars, actor = ports.ladders, ports.calendars, cmd.actor
    sink: EventSink = emit or (lambda event, **kw: None)
    report = WarningReport()
    now, members = warnings.claim(cmd.max_items)
    report.claimed = len(members)
    report.next_due_ms = warnings.next_due_ms
    ops: list[ApplyOp] = []
    for m in members:
        got = store.get(m.dispute_id)
        if got is None or got[1] is not Status.PENDING:
            report.moved_on += 1
            continue
        esc = got[0]
        moved, dup = _moved_on(store.trail(m.dispute_id), m.seq, m.fraction)
        if moved or dup:
            report.moved_on += int(moved)
            report.duplicate += int(dup)
            continue
        try:
            ladder = ladders.get(esc.ladder, esc.ladder_version)
            cal = calendar_of(tier_window(ladder, esc.tier, esc.materiality.amount),
                              esc.calendars(calendars))
            state = store.append_event(LedgerEvent(
                m.dispute_id, "WARNING", f"SLA_WARNING_{int(Decimal(m.fraction) * 100)}",
                actor, now, {},
                {"tier_seq": m.seq, "fraction": m.fraction, "tier": esc.tier,
                 "due_at": esc.due_at.isoformat(), **lateness(m.due_ms, now)},
                expected_seq=esc.seq, calendar_version=cal.version))
        except DuplicateEvent:
            report.duplicate += 1  # unique index: another worker recorded it first
            continue
        except (ConflictError, NotFound):
            report.moved_on += 1
            continue
        except InvalidInput as exc:  # LadderError (a broken release), UnknownTier, calendar
            report.unresolvable += 1
            sink("escalation.warning_dropped", dispute_id=str(esc.dispute_id),
                 trace_id=esc.trace_id, source_hash=esc.source_hash,
                 match_decision="SLA_WARNING_DROPPED", fraction=m.fraction, tier=esc.tier,
                 ladder=esc.ladder_key, reason=str(exc)[:500], worker_id=actor,
                 level="warning")
            continue
        report.recorded += 1
        report.recorded_keys.append(m.member)
        notify = {
            "dispute_id": str(esc.dispute_id), "seq": str(state.seq),
            "idempotency_key": f"{esc.dispute_id}:{m.seq}:warn:{m.fraction}",
            "match_decision": "SLA_WARNING", "fraction": m.fraction, "tier": esc.tier,
            "due_ms": str(to_ms(esc.due_at)), "ladder": esc.ladder_key,
            "trace_id": esc.trace_id, "source_hash": esc.source_hash,
            "decided_ms": str(to_ms(now)),
        }
        ops.append(ApplyOp(state, ApplyAction.RESCHEDULE, None, notify))
        sink("escalation.warning", dispute_id=str(esc.dispute_id), trace_id=esc.trace_id,
             source_hash=esc.source_hash, match_decision="SLA_WARNING", fraction=m.fraction,
             tier=esc.tier, seq=state.seq, worker_id=actor)
    if ops:
        results = scheduler.apply(ops)
        report.notified = sum(1 for r in results if r is ApplyOutcome.APPLIED)
    return report
