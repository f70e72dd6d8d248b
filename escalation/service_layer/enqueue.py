"""Use case: a dispute breached (or will breach) its tier's SLA window -> schedule the escalation.

Order (DESIGN.md): record in PostgreSQL first (the system of record), then write payload +
score to Redis atomically. Idempotent per dispute: a second enqueue of a pending dispute
changes nothing and says so (and re-asserts the Redis entry, repairing a crash between the
two writes).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from uuid import UUID

from escalation.domain.calendars import CalendarRegistry, window_end
from escalation.domain.errors import ConflictError, InvalidInput
from escalation.domain.escalation import Escalation, Status, check_instant
from escalation.domain.ladder import Ladder
from escalation.domain.materiality import Materiality
from escalation.domain.sla_timing import (
    calendar_of,
    cap_due,
    compute_deadlines,
    tier_cap,
    tier_window,
)
from escalation.domain.timeutil import require_aware
from escalation.ports import AuditLog, LadderSource, Scheduler

ENQUEUE_CHUNK = 500
OPENED_AT_MAX_SKEW = timedelta(minutes=5)
"""How far past Redis TIME an ``opened_at`` may lie (clocks of the sending system drift);
a dispute cannot have entered its tier later than that."""


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """What a dispute service sends when a dispute enters (or sits in) a review tier.

    Exactly one of ``due_at`` (the breach instant) and ``opened_at`` (the instant the dispute
    entered ``tier``; due = opened_at + the tier's SLA window) is given. Datetimes must be
    timezone-aware. ``tier`` None = the ladder's first tier (or the materiality band's).
    """

    dispute_id: object
    materiality: object
    source_hash: object
    tier: str | None = None
    due_at: datetime | None = None
    opened_at: datetime | None = None
    ladder: str | None = None
    external_id: str | None = None
    trace_id: str | None = None
    anchor_at: datetime | None = None
    """Aware instant of the ladder's regulatory anchor event (e.g. notice of error received);
    None = the tier entry time. Ignored when the ladder has no regulatory rule (issue 4)."""


OnScheduled = Callable[[Sequence[Escalation]], None]
"""Hook called with the escalations just scheduled in Redis (warnings, issue 4 point 6)."""


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """``created`` False = the dispute already had an escalation; ``escalation`` is its state."""

    created: bool
    escalation: Escalation
    status: Status


def build_escalation(
    req: EnqueueRequest, ladder: Ladder, calendars: CalendarRegistry, now: datetime
) -> Escalation:
    """Validate a request into an unrecorded :class:`Escalation` (seq 0).

    Raises:
        InvalidInput: both or neither of due_at/opened_at, naive datetimes, bad money/ids,
            ``opened_at`` later than ``now`` + :data:`OPENED_AT_MAX_SKEW`.
        UnknownTier: ``req.tier`` not in ``ladder``.
    """
    if (req.due_at is None) == (req.opened_at is None):
        raise InvalidInput("give exactly one of due_at (breach time) or opened_at (tier entry)")
    tier_id = req.tier or _start_tier(ladder, req.materiality)
    tier = ladder.tier(tier_id)
    amount = Materiality.parse(req.materiality).amount
    if req.opened_at is not None:
        entered = check_instant(req.opened_at, "opened_at")
        if entered > require_aware(now, "now") + OPENED_AT_MAX_SKEW:
            raise InvalidInput(
                f"opened_at {entered.isoformat()} is in the future (now "
                f"{now.isoformat(timespec='seconds')}); a dispute cannot enter its tier later "
                f"than now + {int(OPENED_AT_MAX_SKEW.total_seconds() // 60)} min of clock skew"
            )
        due = window_end(entered, tier_window(ladder, tier.id, amount), calendars)
    elif req.due_at is not None:
        due = check_instant(req.due_at, "due_at")
        entered = min(require_aware(now, "now"), due)
    deadline = None
    deadlines: tuple[tuple[str, datetime], ...] = ()
    if ladder.deadlines:  # issue 4: deadlines from the anchor, due capped by the tier's ones
        anchor = entered if req.anchor_at is None else check_instant(req.anchor_at, "anchor_at")
        deadlines = compute_deadlines(ladder, anchor, calendars)
        cap, deadline = tier_cap(ladder, tier.id, dict(deadlines), calendars)
        due = cap_due(due, cap, entered)
    return Escalation.new(
        dispute_id=req.dispute_id,
        tier=tier.id,
        due_at=due,
        materiality=req.materiality,
        source_hash=req.source_hash,
        ladder=ladder,
        entered_tier_at=entered,
        trace_id=req.trace_id or uuid.uuid4().hex,
        external_id=req.external_id,
        regulatory_deadline=deadline,
        deadlines=deadlines,
    )


def _start_tier(ladder: Ladder, materiality: object) -> str:
    """First tier, or the start tier of the highest materiality band the amount reaches."""
    amount = Materiality.parse(materiality).amount
    for band in sorted(ladder.bands, key=lambda b: b.min_amount, reverse=True):
        if band.start_tier and amount >= Decimal(band.min_amount):
            return band.start_tier
    return ladder.tiers[0].id


def enqueue_many(
    requests: Sequence[EnqueueRequest],
    *,
    scheduler: Scheduler,
    store: AuditLog,
    ladders: LadderSource,
    calendars: CalendarRegistry,
    default_ladder: str,
    actor: str,
    on_scheduled: OnScheduled | None = None,
    now: datetime | None = None,
) -> list[EnqueueResult]:
    """Validate every request first (nothing is written if one is bad), then record and schedule.

    ``on_scheduled`` (optional) receives each chunk of escalations newly written to Redis
    (used to schedule pre-breach warnings, ``service_layer.warnings``). ``now`` (aware; default
    Redis TIME) is the instant requests are built at: a CSV import passes the one its
    validation pass used, so both passes judge every row alike.

    Raises:
        InvalidInput / UnknownTier: the first bad request (prefixed with its index when >1).
        ConflictError: never for duplicates (they return ``created=False``).
    """
    now = scheduler.time() if now is None else now
    escalations: list[Escalation] = []
    versions: dict[UUID, str] = {}
    for i, req in enumerate(requests):
        ladder = ladders.latest(req.ladder or default_ladder)
        try:
            esc = build_escalation(req, ladder, calendars, now)
            escalations.append(esc)
            window = tier_window(ladder, esc.tier, esc.materiality.amount)
            versions[esc.dispute_id] = calendar_of(window, calendars).version
        except InvalidInput as exc:
            if len(requests) == 1:
                raise
            raise type(exc)(f"request {i + 1}: {exc}") from None
    results: list[EnqueueResult] = []
    for start in range(0, len(escalations), ENQUEUE_CHUNK):
        chunk = escalations[start : start + ENQUEUE_CHUNK]
        recorded = store.record_enqueue_many(chunk, actor, now, versions)
        to_schedule: list[Escalation] = []
        for created, state in recorded:
            got = store.get(state.dispute_id) if not created else (state, Status.PENDING)
            status = got[1] if got else Status.PENDING
            if status is Status.PENDING:
                to_schedule.append(state)
            results.append(EnqueueResult(created, state, status))
        if to_schedule:
            flags = scheduler.enqueue_many(to_schedule)
            if on_scheduled is not None:
                on_scheduled([e for e, new in zip(to_schedule, flags, strict=True) if new])
    return results


def enqueue_on_breach(
    req: EnqueueRequest,
    *,
    scheduler: Scheduler,
    store: AuditLog,
    ladders: LadderSource,
    calendars: CalendarRegistry,
    default_ladder: str,
    actor: str,
    on_scheduled: OnScheduled | None = None,
) -> EnqueueResult:
    """Schedule one escalation (see module doc). Returns whether it was created.

    Raises:
        InvalidInput, UnknownTier: bad request; nothing written.
        ConflictError: the dispute's escalation is already terminal or cancelled.
    """
    result = enqueue_many(
        [req], scheduler=scheduler, store=store, ladders=ladders, calendars=calendars,
        default_ladder=default_ladder, actor=actor, on_scheduled=on_scheduled,
    )[0]
    if not result.created and result.status in (Status.TERMINAL, Status.CANCELLED):
        raise ConflictError(
            f"dispute {result.escalation.dispute_id} already has a {result.status.value} "
            "escalation; nothing changed"
        )
    return result
