"""Use case: a dispute breached (or will breach) its tier's SLA window -> schedule the escalation.

Order (docs/architecture.md "Where the truth lives"): record in PostgreSQL first (the system
of record), then write payload +
score to Redis atomically. Idempotent per dispute: a second enqueue of a pending dispute
changes nothing and says so (and re-asserts the Redis entry, repairing a crash between the
two writes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from functools import lru_cache

from escalation.domain.calendars import (
    CalendarRegistry,
    institution_defaults,
    start_of_local_day,
    window_end,
    with_institution,
    zone,
)
from escalation.domain.deadline_rules import check_attributes
from escalation.domain.errors import (
    ConflictError,
    InvalidInput,
    InvalidItems,
    InvalidParameter,
    LadderReleaseError,
    about,
    invalid_items,
)
from escalation.domain.escalation import ENDED, Escalation, NewEscalation, Status, check_instant
from escalation.domain.ladder import Ladder
from escalation.domain.materiality import Materiality
from escalation.domain.obligations import clocks as obligation_clocks
from escalation.domain.sla_timing import (
    DueCap,
    calendar_of,
    cap_due,
    cap_provenance,
    resolve_deadlines,
    tier_cap,
    tier_window,
)
from escalation.domain.source_attributes import FIELD as SOURCE_ATTRIBUTES
from escalation.domain.source_attributes import check_source_attributes
from escalation.domain.timeutil import require_aware
from escalation.ports import AuditLog, LadderSource, Scheduler
from escalation.service_layer import trace_id_source
from escalation.service_layer.core import CorePorts

ENQUEUE_CHUNK = 1_000
"""Escalations per transaction + Redis enqueue round of :func:`enqueue_many` (the API batch
maximum: one batch request = one transaction)."""
OPENED_AT_MAX_SKEW = timedelta(minutes=5)
"""How far past Redis TIME an ``opened_at`` may lie (clocks of the sending system drift);
a dispute cannot have entered its tier later than that."""
PAST_DUE_TOLERANCE = timedelta(minutes=5)
"""How far before Redis TIME a due time may lie before it is flagged as past due, whether the
request gave it (``due_at``) or it follows from ``opened_at`` + the tier's SLA window: accepted
(the dispute did breach; it is escalated at once), with ``past_due`` on its ENQUEUED ledger
row and in the result (``EnqueueResult.past_due_ms``), so a sender whose clock or arithmetic
is wrong is seen, not silently escalated. ``due_in`` avoids the question."""
DUE_IN_MAX = timedelta(days=3650)
"""The farthest after now (Redis TIME) a due time may lie, whichever input gives it
(``due_at``, ``due_in``, or ``opened_at`` + the tier's SLA window): ten years. One bound for
every due instant; a later one is refused naming the field that gave it."""


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """What a dispute service sends when a dispute enters (or sits in) a review tier.

    Exactly one of ``due_at`` (the breach instant), ``due_in`` (the breach delay from now,
    Redis TIME: due = now + due_in, no clock or zone of the sender involved) and
    ``opened_at`` (the instant the dispute entered ``tier``; due = opened_at + the tier's SLA
    window) is given. Datetimes must be timezone-aware. ``tier`` None = the ladder's first
    tier (or the materiality band's). A due time (given as ``due_at``, or derived from
    ``opened_at``) more than :data:`PAST_DUE_TOLERANCE` before now is flagged
    (``past_due``), not refused.
    """

    dispute_id: object
    materiality: object
    source_hash: object
    tier: str | None = None
    due_at: datetime | date | None = None
    opened_at: datetime | date | None = None
    ladder: str | None = None
    external_id: str | None = None
    trace_id: str | None = None
    anchor_at: datetime | date | None = None
    """Aware instant of the ladder's regulatory anchor event (e.g. notice of error received);
    None = the tier entry time. Ignored when the ladder has no regulatory rule (docs/sla.md)."""
    timezone: str | None = None
    """IANA zone of the institution for this dispute (None = the ladder version's, else the
    deployment's). A ``date`` in ``opened_at``/``due_at``/``anchor_at`` is a local date there."""
    calendar: str | None = None
    """Base business calendar id for this dispute (None = the ladder version's, else the
    deployment's ``institution_calendar``)."""
    attributes: Mapping[str, object] | None = None
    """Dispute attributes the ladder's deadlines need (e.g. ``cycle_closing_day``,
    ``new_account``); missing ones are refused (``Ladder.needs``)."""
    due_in: timedelta | None = None
    """The breach delay from now (Redis TIME), 0 to :data:`DUE_IN_MAX`; instead of
    ``due_at`` / ``opened_at``."""
    source: str | None = None
    """The source system's name (the API's and CLI's ``source`` given with the external id;
    an import mapping's ``external_source``): kept on the ENQUEUED row (``details.source``),
    the projection and the webhook event; None = not known."""
    source_attributes: Mapping[str, str] | None = None
    """The source system's own facts about the dispute (a CFPB complaint's product, issue,
    company, state...; ``domain.source_attributes``): recorded in the ENQUEUED row's
    ``details.source_attributes`` and shown beside the dispute; nothing acts on them.
    None or empty = none."""


OnScheduled = Callable[[Sequence[Escalation]], object]
"""Hook called with the escalations just scheduled in Redis (pre-breach warnings,
docs/sla.md "Warnings before breach"); what it returns is ignored."""


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """``created`` False = the dispute already had an escalation; ``escalation`` is its state."""

    created: bool
    escalation: Escalation
    status: Status
    requested_source_hash: str | None = None
    """The source hash this request carried (validated, lower-case); None = not known."""
    past_due_ms: int | None = None
    """How long before now (ms) the request's due time (its ``due_at``, or ``opened_at`` +
    the tier's SLA window) lay when it was more than :data:`PAST_DUE_TOLERANCE` (flagged on
    the ENQUEUED row as ``past_due``, with ``from`` naming the input); else None."""

    @property
    def source_hash_differs(self) -> bool:
        """A replay whose request carried another source hash than the one recorded.

        Enqueue never rewrites an existing escalation, so such a request changed nothing:
        the caller is told (CLI ``enqueue --json`` and the API's create responses report
        this same flag), since the dispute's source record may have changed meanwhile and
        its new content was not applied (a dispute id is escalated once)."""
        return (not self.created and self.requested_source_hash is not None
                and self.requested_source_hash != self.escalation.source_hash)


def institution_of(
    req: EnqueueRequest, ladder: Ladder, calendars: CalendarRegistry
) -> tuple[str, str]:
    """``(base calendar id, IANA zone)`` a request counts in: the request's own, else the
    ladder version's ``[institution]``, else the deployment default (the registry's
    ``institution`` calendar). Raises InvalidInput for an unknown zone or calendar."""
    base_cal, base_tz = institution_defaults(calendars)
    cal_id = req.calendar or ladder.institution_calendar or base_cal
    tz_name = req.timezone or ladder.institution_timezone or base_tz
    with about("timezone"):
        zone(tz_name)
    with about("calendar"):
        with_institution(calendars, cal_id, tz_name)
    return cal_id, tz_name


def _instant(value: datetime | date, tz_name: str, name: str) -> datetime:
    """A request time: an aware datetime as is; a ``date`` = start of that local date in
    the institution's zone (escalation.domain.calendars)."""
    if isinstance(value, date) and not isinstance(value, datetime):
        return check_instant(_day_start(value, tz_name), name)
    return check_instant(value, name)


@lru_cache(maxsize=4096)
def _day_start(day: date, tz_name: str) -> datetime:
    """Start of local ``day`` in zone ``tz_name`` (pure; cached: an import's rows share a few
    hundred opening dates)."""
    return start_of_local_day(day, zone(tz_name))


def _not_future(at: datetime, now: datetime, name: str = "opened_at") -> datetime:
    """``at`` unless it lies more than :data:`OPENED_AT_MAX_SKEW` past ``now``: a dispute
    cannot enter its tier, nor its notice arrive (``notice_at``, the anchor of the regulatory
    deadlines), after the moment it is enqueued. Raises InvalidInput naming ``name``."""
    if at > require_aware(now, "now") + OPENED_AT_MAX_SKEW:
        what = ("a notice cannot be received" if name == "notice_at"
                else "a dispute cannot enter its tier")
        raise InvalidInput(
            f"{name} {at.isoformat()} is in the future (now "
            f"{now.isoformat(timespec='seconds')}); {what} later "
            f"than now + {int(OPENED_AT_MAX_SKEW.total_seconds() // 60)} min of clock skew",
            field=name)
    return at


def build_escalation(
    req: EnqueueRequest, ladder: Ladder, calendars: CalendarRegistry, now: datetime
) -> Escalation:
    """Validate a request into an unrecorded :class:`Escalation` (seq 0).

    Raises:
        InvalidInput: both or neither of due_at/opened_at, naive datetimes, bad money/ids,
            unknown zone/calendar, a dispute attribute the ladder needs is missing, source
            attributes past their bounds (``domain.source_attributes``, naming the field),
            ``opened_at`` or ``notice_at`` (``anchor_at``) later than ``now`` +
            :data:`OPENED_AT_MAX_SKEW`, a due time more than :data:`DUE_IN_MAX` after
            ``now`` (InvalidParameter naming ``due_at``, ``due_in`` or ``opened_at``).
        UnknownTier: ``req.tier`` not in ``ladder``.
    """
    return build_with_provenance(req, ladder, calendars, now)[0]


def build_with_provenance(
    req: EnqueueRequest, ladder: Ladder, calendars: CalendarRegistry, now: datetime
) -> tuple[Escalation, dict[str, object]]:
    """:func:`build_escalation` plus the ENQUEUED row's provenance details: the institution
    zone and calendar, the attributes used, every deadline with its citation and the rule
    applied, and the deadline bounding the due time (``details["deadline"]``)."""
    given = [n for n, v in (("due_at", req.due_at), ("due_in", req.due_in),
                            ("opened_at", req.opened_at)) if v is not None]
    if len(given) != 1:
        # the field: the second one given (the first would have done), else due_at
        field = given[1] if given else "due_at"
        raise InvalidParameter(
            "give exactly one of {due_at} (breach time), {due_in} (breach delay from now) or "
            "{opened_at} (tier entry); got "
            + (" and ".join("{" + n + "}" for n in given) if given else "none"),
            field, *(n for n in ("due_at", "due_in", "opened_at") if n != field))
    cal_id, tz_name = institution_of(req, ladder, calendars)
    scoped = with_institution(calendars, cal_id, tz_name)
    with about("attributes"):
        attributes = check_attributes(ladder.needs, req.attributes or {})
    money = Materiality.parse(req.materiality)
    tier_id = req.tier or _start_tier(ladder, money)
    tier = ladder.tier(tier_id)
    amount = money.amount
    if req.opened_at is not None:
        entered = _not_future(_instant(req.opened_at, tz_name, "opened_at"), now)
        due = window_end(entered, tier_window(ladder, tier.id, amount), scoped)
    elif req.due_at is not None:
        due = _instant(req.due_at, tz_name, "due_at")
        entered = min(require_aware(now, "now"), due)
    else:
        due = require_aware(now, "now") + _due_in(req.due_in)
        entered = now
    if due - now > DUE_IN_MAX:  # due_in is checked by _due_in against the same bound
        raise InvalidParameter("{" + given[0] + "} gives a due time {due} more than {days} "
                               "days after now", given[0], due=due.isoformat(),
                               days=DUE_IN_MAX.days)
    details: dict[str, object] = {"institution": {"timezone": tz_name, "calendar": cal_id}}
    # a past due time is flagged whichever input gave it: due_at itself, or opened_at + the
    # tier's SLA window (due_in is never in the past)
    if req.due_in is None and now - due > PAST_DUE_TOLERANCE:
        details["past_due"] = {"behind_ms": (now - due) // timedelta(milliseconds=1),
                               "tolerance_ms": PAST_DUE_TOLERANCE // timedelta(milliseconds=1),
                               "received_at": now.isoformat(),
                               "from": "due_at" if req.due_at is not None else "opened_at"}
    if attributes:
        details["attributes"] = attributes
    if req.source is not None:
        details["source"] = req.source
    if req.source_attributes:
        details[SOURCE_ATTRIBUTES] = check_source_attributes(req.source_attributes)
    deadline = None
    deadlines: tuple[tuple[str, datetime], ...] = ()
    if ladder.deadlines:  # deadlines from the anchor; the due time is capped by the tier's ones
        anchor = entered if req.anchor_at is None else _not_future(
            _instant(req.anchor_at, tz_name, "notice_at"), now, "notice_at")
        resolved = resolve_deadlines(ladder, anchor, scoped, attributes)
        # a conditional clock starts at its conservative instant (obligations.clocks)
        deadlines = tuple((c.name, c.at) for c in obligation_clocks(
            ladder, {r.name: r.at for r in resolved}, (), scoped, attributes)
            if c.at is not None)
        details["anchor_at"] = anchor.isoformat()
        sources = {r.name: r.source for r in resolved}
        details["deadline_rules"] = {r.name: {"at": r.at.isoformat(), "citation": r.source,
                                              "rule": r.rule} for r in resolved}
        cap, deadline = tier_cap(ladder, tier.id, dict(deadlines), scoped)
        uncapped = due
        due = cap_due(due, cap, entered)
        prov = cap_provenance(ladder, tier.id, dict(deadlines), scoped,
                              DueCap(uncapped, due, at=deadline, sources=sources))
        if prov is not None:
            details["deadline"] = prov
    esc = Escalation.new(NewEscalation(
        dispute_id=req.dispute_id,
        tier=tier.id,
        due_at=due,
        materiality=money,
        source_hash=req.source_hash,
        entered_tier_at=entered,
        trace_id=req.trace_id or trace_id_source.new_trace_id(),
        external_id=req.external_id,
        regulatory_deadline=deadline,
        deadlines=deadlines,
        institution_tz=tz_name,
        institution_calendar=cal_id,
        source=req.source),
        ladder)
    return esc, details


def _due_in(value: object) -> timedelta:
    """``due_in`` checked: a timedelta, 0 to :data:`DUE_IN_MAX`.

    Raises:
        InvalidParameter: naming ``due_in`` (the API's ``errors[].field``, the CLI's
            ``--due-in``), for another type or a delay out of range."""
    if not isinstance(value, timedelta):
        raise InvalidParameter("{due_in} must be a duration, got {got}", "due_in",
                               got=type(value).__name__)
    if value < timedelta(0) or value > DUE_IN_MAX:
        raise InvalidParameter("{due_in} must be 0 to {days} days, got {got}", "due_in",
                               days=DUE_IN_MAX.days, got=value)
    return value


def _start_tier(ladder: Ladder, materiality: object) -> str:
    """First tier, or the start tier of the highest materiality band the amount reaches."""
    amount = Materiality.parse(materiality).amount
    for band in sorted(ladder.bands, key=lambda b: b.min_amount, reverse=True):
        if band.start_tier and amount >= Decimal(band.min_amount):
            return band.start_tier
    return ladder.tiers[0].id


@dataclass(frozen=True, slots=True)
class BuiltEnqueue:
    """A validated request, ready to record: the unrecorded escalation (seq 0), the ENQUEUED
    row's provenance details and the version of the calendar its due time was counted in."""

    escalation: Escalation
    details: dict[str, object]
    calendar_version: str


def build_one(
    req: EnqueueRequest, ladder: Ladder, calendars: CalendarRegistry, now: datetime
) -> BuiltEnqueue:
    """:func:`build_with_provenance` plus the calendar version (what :func:`record_built`
    needs). Raises InvalidInput / UnknownTier as :func:`build_escalation`."""
    esc, prov = build_with_provenance(req, ladder, calendars, now)
    window = tier_window(ladder, esc.tier, esc.materiality.amount)
    return BuiltEnqueue(esc, prov, calendar_of(window, esc.calendars(calendars)).version)


def build_many(
    requests: Sequence[EnqueueRequest], *, ladders: LadderSource, calendars: CalendarRegistry,
    default_ladder: str, now: datetime,
) -> list[BuiltEnqueue]:
    """Validate every request at ``now`` (aware) into :class:`BuiltEnqueue` values.

    Raises:
        InvalidInput / UnknownTier: the bad request (its ``item`` set when there are more
            than one); :class:`~escalation.domain.errors.InvalidItems` holding each one
            when several are bad.
        LadderError: a named ladder does not exist.
        LadderReleaseError: a released ladder file that cannot be read (at once).
    """
    built: list[BuiltEnqueue] = []
    bad: list[InvalidInput] = []
    resolved: dict[str, Ladder] = {}
    for i, req in enumerate(requests):
        name = req.ladder or default_ladder
        ladder = resolved.get(name)
        if ladder is None:
            with about("ladder"):
                ladder = resolved[name] = ladders.latest(name)
        try:
            built.append(build_one(req, ladder, calendars, now))
        except LadderReleaseError:
            raise  # the deployment's fault, not the request's
        except InvalidInput as exc:
            if len(requests) == 1:
                raise
            bad.append(exc.in_item(i))
    if bad:
        raise invalid_items(bad)
    return built


def record_built(
    built: Sequence[BuiltEnqueue], ports: CorePorts, actor: str, now: datetime,
    on_scheduled: OnScheduled | None = None,
) -> list[EnqueueResult]:
    """Record (PostgreSQL first) then schedule (Redis) already validated escalations,
    :data:`ENQUEUE_CHUNK` per transaction + script call; one result per input, in input
    order. ``actor`` is who enqueues (ledger ``actor``); ``now`` (aware) is the ENQUEUED
    rows' decision instant (the one they were built at).
    """
    chunks = (built[i : i + ENQUEUE_CHUNK] for i in range(0, len(built), ENQUEUE_CHUNK))
    results: list[EnqueueResult] = []
    for part in record_batches(chunks, ports, actor, now, on_scheduled):
        results += part
    return results


def record_batches(
    batches: Iterable[Sequence[BuiltEnqueue]], ports: CorePorts, actor: str, now: datetime,
    on_scheduled: OnScheduled | None = None,
) -> Iterator[list[EnqueueResult]]:
    """:func:`record_built` over a stream of batches (one transaction each), yielding each
    batch's results once PostgreSQL has recorded it.

    Each batch is recorded in PostgreSQL (``ports.store``) before it is scheduled in Redis
    (``ports.scheduler``; the order of :func:`enqueue_many`), and ``on_scheduled`` receives
    the escalations each Redis step newly scheduled. ``ports.pipeline`` decides whether the
    Redis step of one batch overlaps the recording of the next; either way the generator
    does not finish before every Redis step has, and an error from either step is raised
    here.
    """
    store, scheduler = ports.store, ports.scheduler

    def record(part: Sequence[BuiltEnqueue]) -> tuple[list[EnqueueResult], list[Escalation]]:
        return _record_one(part, store, actor, now)

    def behind(recorded: tuple[list[EnqueueResult], list[Escalation]]) -> None:
        if recorded[1]:
            schedule(scheduler, recorded[1], on_scheduled)

    for results, _ in ports.pipeline.run(batches, record, behind, _nothing):
        yield results


def _nothing(recorded: object, behind: object) -> None:
    """Nothing to do in the caller's thread once a batch's Redis step ended."""


def _record_one(
    part: Sequence[BuiltEnqueue], store: AuditLog, actor: str, now: datetime,
) -> tuple[list[EnqueueResult], list[Escalation]]:
    """Record one batch in PostgreSQL: (its results, the pending escalations to schedule).

    A dispute repeated within ``part`` is recorded (and scheduled) from its first occurrence
    only; every later occurrence is answered like a replay: ``created=False`` with the state
    PostgreSQL holds (see :func:`enqueue_many`)."""
    unique, where = _first_occurrences(part)
    chunk = [b.escalation for b in unique]
    versions = {b.escalation.dispute_id: b.calendar_version for b in unique}
    details = {b.escalation.dispute_id: b.details for b in unique}
    recorded = store.record_enqueue_many(chunk, actor, now, versions, details)
    firsts: list[EnqueueResult] = []
    to_schedule: list[Escalation] = []
    replays = [state.dispute_id for created, state in recorded if not created]
    held = store.get_many(replays) if replays else {}  # one read for the batch's replays
    for b, (created, state) in zip(unique, recorded, strict=True):
        got = None if created else held.get(state.dispute_id)
        status = got.status if got is not None else Status.PENDING
        if status is Status.PENDING:
            to_schedule.append(state)
        past = b.details.get("past_due")
        firsts.append(EnqueueResult(created, state, status, b.escalation.source_hash,
                                    past["behind_ms"] if created and isinstance(past, dict)
                                    else None))
    if where is None:
        return firsts, to_schedule
    results: list[EnqueueResult] = []
    answered: set[int] = set()
    for b, k in zip(part, where, strict=True):
        first = firsts[k]
        if k in answered:  # a later occurrence: the recorded state, not its own values
            # (its own source hash, though: the caller is told if it was not applied)
            results.append(EnqueueResult(False, first.escalation, first.status,
                                         b.escalation.source_hash))
        else:
            results.append(first)
            answered.add(k)
    return results, to_schedule


def _first_occurrences(
    part: Sequence[BuiltEnqueue],
) -> tuple[Sequence[BuiltEnqueue], list[int] | None]:
    """``(first occurrence of each dispute in input order, index into it per input)``; the
    index list is None when no dispute repeats (the common case: ``part`` as is)."""
    index: dict[object, int] = {}
    for b in part:
        index.setdefault(b.escalation.dispute_id, len(index))
    if len(index) == len(part):
        return part, None
    unique: list[BuiltEnqueue] = []
    where: list[int] = []
    for b in part:
        k = index[b.escalation.dispute_id]
        if k == len(unique):
            unique.append(b)
        where.append(k)
    return unique, where


def schedule(scheduler: Scheduler, escalations: list[Escalation],
              on_scheduled: OnScheduled | None) -> None:
    """Write ``escalations`` to Redis; pass the newly scheduled ones to ``on_scheduled``."""
    flags = scheduler.enqueue_many(escalations)
    if on_scheduled is not None:
        on_scheduled([e for e, new in zip(escalations, flags, strict=True) if new])


@dataclass(frozen=True, slots=True)
class EnqueueMany:
    """Enqueue a batch of disputes (the command of :func:`enqueue_many`).

    ``requests``: one :class:`EnqueueRequest` each (validated first, all of them: nothing is
    written when one is bad). ``actor``: who enqueues (ledger ``actor``). ``default_ladder``:
    the ladder of a request that names none. ``now``: the aware instant the requests are
    built at (default: Redis TIME).
    """

    requests: Sequence[EnqueueRequest]
    actor: str
    default_ladder: str
    now: datetime | None = None


@dataclass(frozen=True, slots=True)
class EnqueueOne:
    """Enqueue one dispute (the command of :func:`enqueue_on_breach`): ``request``, who
    enqueues (``actor``) and the ladder of a request that names none (``default_ladder``)."""

    request: EnqueueRequest
    actor: str
    default_ladder: str


def enqueue_many(cmd: EnqueueMany, ports: CorePorts,
                 on_scheduled: OnScheduled | None = None) -> list[EnqueueResult]:
    """Validate every request first (nothing is written if one is bad), then record and schedule.

    Returns one :class:`EnqueueResult` per request, in request order. Idempotent per dispute:
    a dispute that already has an escalation is answered ``created=False`` with the state
    PostgreSQL holds (and its status). The same holds within one call: when a dispute appears
    more than once in ``requests``, its first occurrence is the one recorded and scheduled,
    and every later occurrence is answered like a replay -- ``created=False`` with the state
    actually recorded (the first occurrence's trace id, due time, ...), never with its own
    unrecorded values, whether its content is identical or not. The ledger gets one ENQUEUED
    row per dispute.

    ``on_scheduled`` (optional) receives each chunk of escalations newly written to Redis
    (used to schedule pre-breach warnings, ``service_layer.warnings``).

    Raises:
        InvalidInput / UnknownTier: the first bad request (prefixed with its index when >1).
        ConflictError: never for duplicates (they return ``created=False``).
    """
    now = ports.scheduler.time() if cmd.now is None else cmd.now
    built = build_many(cmd.requests, ladders=ports.ladders, calendars=ports.calendars,
                       default_ladder=cmd.default_ladder, now=now)
    return record_built(built, ports, cmd.actor, now, on_scheduled)


def validation_errors(cmd: EnqueueMany, ports: CorePorts,
                      positions: Sequence[int]) -> list[InvalidInput]:
    """The errors validating ``cmd.requests`` finds (as :func:`enqueue_many` would, at
    ``cmd.now`` or Redis TIME), each about its position in the caller's batch
    (``positions[k]`` for ``cmd.requests[k]``, :meth:`InvalidInput.in_item`); nothing is
    written. An error about no one request (an unknown ladder among several requests) is
    left out: the caller reports it once the rest is fixed.

    Raises:
        LadderReleaseError: a released ladder file that cannot be read.
    """
    if not cmd.requests:
        return []
    now = cmd.now if cmd.now is not None else ports.scheduler.time()
    try:
        build_many(cmd.requests, ladders=ports.ladders, calendars=ports.calendars,
                   default_ladder=cmd.default_ladder, now=now)
    except LadderReleaseError:
        raise
    except InvalidItems as exc:
        found: Sequence[InvalidInput] = exc.errors
    except InvalidInput as exc:
        found = [exc]
    else:
        return []
    if len(cmd.requests) == 1:
        return [found[0].in_item(positions[0])]
    return [e.in_item(positions[e.item]) for e in found if e.item is not None]


def enqueue_on_breach(cmd: EnqueueOne, ports: CorePorts,
                      on_scheduled: OnScheduled | None = None) -> EnqueueResult:
    """Schedule one escalation (see module doc). Returns whether it was created.

    Raises:
        InvalidInput, UnknownTier: bad request; nothing written.
        ConflictError: the dispute's escalation is already terminal or cancelled.
    """
    result = enqueue_many(EnqueueMany([cmd.request], cmd.actor, cmd.default_ladder), ports,
                          on_scheduled)[0]
    if not result.created and result.status in ENDED:
        raise ConflictError(
            f"dispute {result.escalation.dispute_id} already has a {result.status.value} "
            "escalation; nothing changed"
        )
    return result
