"""Obligations: which recorded action stops which regulatory clock (pure).

A regulatory deadline is not met because the dispute was eventually closed. It is met when
an action that its ladder names in ``met_by`` happened strictly before its instant
(docs/adr/0010-obligations-and-resolution.md; docs/sla.md "Obligations"). Three kinds of
clock come from the ladder file:

* **anchor clocks** run from the dispute's anchor event (e.g. the notice of error received)
  and are computed at enqueue (``domain.deadline_rules``);
* **action clocks** (``started_by``) run from the first recorded instant of an action, e.g.
  Reg E's 2 business days to tell the consumer of a provisional credit (12 CFR
  1005.11(c)(2)(ii));
* **conditional clocks** (``requires``) have their own window only when an action happened
  before another deadline; otherwise they fall at that deadline. Reg E: the 45 (90)-day
  investigation period is available only with a provisional credit within the 10 (20)
  business days (12 CFR 1005.11(c)(2)(i)); without one, the determination is due at 10 (20).

:func:`clocks` places every clock, :func:`assess` says for each one whether it is met,
missed, at risk, pending or undetermined, and :func:`binding` lists the clocks that still cap
the tiers. These are the only places the rule lives: the re-plan of a recorded action, the
HTTP API, ``report sla``, ``audit search --deadlines`` and the console all call them.

**Assertions without an instant.** An imported outcome may state only that an action
happened and whether the source counted it timely (CFPB "Timely response? Yes"). Such an
action has ``occurred_at`` None, and no instant is ever invented for it. The assertion
speaks of the first deadline the action meets, which is then met (``timely``) or missed per
the source, with the lateness unknown. A later deadline that the same action meets is met
per the source when the action was timely. Otherwise it is ``undetermined``: closed, but the
source does not say when. This holds whatever the current time and whenever the assertion
was recorded: a late answer is never met on record without an instant. Only an assertion
that states no timeliness is bounded by its recording: an action cannot have happened after
the ledger recorded it, so one recorded before a deadline meets it on record.

**What counts** (:func:`effective`): a partial money action (below the disputed amount where
the ladder needs the full amount) meets and starts nothing. On a version that declares
actions, a ``cancel`` (outcome ``unstated``) is no resolution, and only ``resolve`` is. An
action clock is met only by an action at or after its start, unless the ladder says
``counts_before_start`` (a span before the start, in the deadline's unit and calendar).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from escalation.domain.calendars import CalendarRegistry
from escalation.domain.errors import ConflictError
from escalation.domain.escalation import Status
from escalation.domain.ladder import RESOLUTION, Ladder, RegulatoryDeadline
from escalation.domain.sla_timing import regulatory_cap

AT_RISK = timedelta(hours=48)
"""An open deadline within this span of *now* is at risk (the console's default)."""


class DeadlineState(StrEnum):
    """The state of one regulatory deadline of one dispute, the same word everywhere."""

    MET = "met"
    MISSED = "missed"
    AT_RISK = "at_risk"
    PENDING = "pending"
    UNDETERMINED = "undetermined"
    """Closed, but the source gives no instant for the action and no timeliness for this
    deadline: neither met nor missed can be shown."""


STATES: tuple[str, ...] = tuple(s.value for s in DeadlineState)


class Basis(StrEnum):
    """What a met or missed state rests on."""

    RECORD = "record"  # an action on the ledger with its instant
    SOURCE = "source"  # an imported assertion, instant unknown


class Outcome(StrEnum):
    """Outcome codes of a resolution (docs/sla.md "Resolution outcomes").

    The first five are the error-resolution findings of Reg E (12 CFR 1005.11(c), (d)) and
    Reg Z (12 CFR 1026.13(e), (f)). The ``closed_*`` codes are the CFPB complaint export's
    "Company response to consumer" values. ``unstated`` is a ``cancel``, which records no
    outcome.
    """

    ERROR_CORRECTED = "error_corrected"
    PARTIALLY_CORRECTED = "partially_corrected"
    DIFFERENT_ERROR_CORRECTED = "different_error_corrected"
    NO_ERROR_FOUND = "no_error_found"
    WITHDRAWN_BY_CONSUMER = "withdrawn_by_consumer"
    CHARGEBACK_WON = "chargeback_won"
    CHARGEBACK_LOST = "chargeback_lost"
    CLOSED_WITH_EXPLANATION = "closed_with_explanation"
    CLOSED_WITH_MONETARY_RELIEF = "closed_with_monetary_relief"
    CLOSED_WITH_NON_MONETARY_RELIEF = "closed_with_non_monetary_relief"
    CLOSED_WITH_RELIEF = "closed_with_relief"
    CLOSED_WITHOUT_RELIEF = "closed_without_relief"
    CLOSED = "closed"
    UNSTATED = "unstated"


@dataclass(frozen=True, slots=True)
class RecordedAction:
    """One action (or the resolution) on a dispute's ledger, as the rule reads it.

    Attributes:
        action: the action id, or :data:`~escalation.domain.ladder.RESOLUTION`.
        occurred_at: aware UTC instant the action happened; None when the source did not
            give it (an imported assertion).
        actor: who did it (token name or named operator; the importer for assertions).
        seq: the ledger row's seq (0 when not yet recorded).
        asserted_timely: for an assertion without an instant: did the source count the
            action timely (True/False), or None when it says nothing.
        outcome: the outcome code of a resolution, else None.
        recorded_at: aware UTC instant the ledger row was written (Redis TIME), None for an
            action not yet recorded. An action cannot have happened after its recording, so
            an assertion that states no timeliness (``asserted_timely`` None) recorded
            before a deadline meets it on record; a stated timeliness is taken as given.
        partial: a money action below the disputed amount where the ladder needs the full
            amount (``ActionDef.full_amount``): recorded, but it meets and starts nothing.
        unchecked: such an action on a dispute whose disputed amount is not on record
            (materiality 0.00): it counts, and every answer says its amount was not checked.
    """

    action: str
    occurred_at: datetime | None
    actor: str = ""
    seq: int = 0
    asserted_timely: bool | None = None
    outcome: str | None = None
    recorded_at: datetime | None = None
    partial: bool = False
    unchecked: bool = False


@dataclass(frozen=True, slots=True)
class Clock:
    """Where one deadline of one dispute falls.

    Attributes:
        name: the deadline's name in the ladder.
        at: aware UTC instant (met by anything strictly before it); None when the action
            that starts it has no known instant.
        rule: human text of why it falls there (e.g. ``"no timely provisional_credit: due
            with determine_or_provisionally_credit"``); ``""`` for the ladder's own rule.
        start: for an action clock, the earliest instant of an action that meets it: the
            action that started it, or ``counts_before_start`` earlier (None for anchor
            clocks).
    """

    name: str
    at: datetime | None
    rule: str = ""
    start: datetime | None = None


@dataclass(frozen=True, slots=True)
class Assessment:
    """One deadline's state.

    Attributes:
        name: the deadline. at: its instant (None: unknown). state: :class:`DeadlineState`.
        basis: what a met/missed state rests on (None while open).
        by: the action that met it, or the late action that ended a miss (None while open).
        late_s: seconds late: up to the late action, or up to *now* while open; 0 when not
            missed; None when the source says missed without an instant.
        citation: the rule's source. rule: :attr:`Clock.rule`.
    """

    name: str
    at: datetime | None
    state: DeadlineState
    basis: Basis | None
    by: RecordedAction | None
    late_s: float | None
    citation: str = ""
    rule: str = ""

    @property
    def met_or_missed_at(self) -> datetime | None:
        """Met: the instant of the action that met it (None per source). Missed: the
        deadline instant. Else None."""
        if self.state is DeadlineState.MET:
            return None if self.by is None else self.by.occurred_at
        return self.at if self.state is DeadlineState.MISSED else None


def cancel_is_resolution(ladder: Ladder) -> bool:
    """Whether a ``cancel`` counts as the dispute's resolution under ``ladder``: only on a
    version that declares no actions (docs/sla.md, "What a cancel meets"). There a cancelled
    dispute is resolved and a later ``resolve`` is refused; on a version that declares
    actions a cancel records no finding and a ``resolve`` may follow it."""
    return not ladder.actions


def check_resolvable(ladder: Ladder, status: Status, dispute: object) -> None:
    """Refuse a ``resolve`` of ``dispute`` (its id, for the message) whose escalation, pinned
    to ``ladder``, is in ``status`` and already has its resolution: resolved, or cancelled
    on a version where the cancel counts as the resolution (:func:`cancel_is_resolution`).

    Raises:
        ConflictError: (code ``CONFLICT``) already resolved, or cancelled on a version that
            declares no actions; nothing may be written.
    """
    if status is Status.RESOLVED:
        raise ConflictError(f"dispute {dispute} is already resolved; nothing written")
    if status is Status.CANCELLED and cancel_is_resolution(ladder):
        raise ConflictError(
            f"dispute {dispute} is cancelled, and on ladder {ladder.key} (no actions "
            "declared) the cancel is its resolution; nothing written")


def effective(ladder: Ladder, actions: Iterable[RecordedAction]) -> list[RecordedAction]:
    """The actions that count under ``ladder``: a partial money action never counts, and on a
    version that declares actions a ``cancel`` (a resolution with the outcome ``unstated``)
    is no resolution. It stops the escalation, but it records no finding, so only
    ``resolve`` meets a deadline there. On older versions a cancel still counts as the
    resolution, as it always did (:func:`cancel_is_resolution`)."""
    obligations = not cancel_is_resolution(ladder)
    return [a for a in actions if not a.partial
            and not (obligations and a.action == RESOLUTION
                     and a.outcome == Outcome.UNSTATED.value)]


def _first_recorded(
    actions: Iterable[RecordedAction], ids: Iterable[str],
) -> RecordedAction | None:
    """The earliest action among ``ids`` that has an instant."""
    wanted = set(ids)
    found = [a for a in actions if a.action in wanted and a.occurred_at is not None]
    return min(found, key=lambda a: (a.occurred_at, a.seq)) if found else None


def _first_deadline_of(
    ladder: Ladder, action: str, at: Mapping[str, datetime | None],
) -> str | None:
    """The deadline with the earliest known instant that ``action`` meets."""
    named = [(t, d.name) for d in ladder.deadlines
             if action in d.met_by and (t := at.get(d.name)) is not None]
    return min(named)[1] if named else None


def _asserted(
    ladder: Ladder, actions: Iterable[RecordedAction], rule: RegulatoryDeadline,
    at: Mapping[str, datetime | None],
) -> tuple[DeadlineState, RecordedAction] | None:
    """The state an assertion without an instant gives ``rule`` (module doc), or None."""
    best: tuple[DeadlineState, RecordedAction] | None = None
    for a in actions:
        if a.occurred_at is not None or a.action not in rule.met_by:
            continue
        first = _first_deadline_of(ladder, a.action, at)
        if a.asserted_timely is True:
            return DeadlineState.MET, a
        if a.asserted_timely is False and first == rule.name:
            best = (DeadlineState.MISSED, a)
        elif best is None:
            best = (DeadlineState.UNDETERMINED, a)
    return best


def clocks(
    ladder: Ladder, base: Mapping[str, datetime], actions: Sequence[RecordedAction],
    calendars: CalendarRegistry, attributes: Mapping[str, object] | None = None,
) -> list[Clock]:
    """Every clock of a dispute, in the ladder's order.

    Args:
        ladder: the dispute's pinned ladder version.
        base: anchor clocks by name as computed at enqueue, each conditional one with its
            own (long) window; names absent from ``base`` are skipped (an older row).
        actions: the dispute's recorded actions and resolution, any order.
        calendars: the registry scoped to the dispute's institution.
        attributes: the dispute attributes (variants of an action clock).

    Returns:
        A clock per known deadline. An action clock appears once its action is recorded,
        at None when the action has no instant. A conditional clock falls at its ``within``
        deadline until its action is recorded before that.

    Raises:
        InvalidInput: an unknown calendar or a missing attribute of an action clock.
    """
    actions = effective(ladder, actions)
    placed: dict[str, Clock] = {}
    for d in ladder.deadlines:  # anchor clocks first: conditional ones refer to them
        if not d.started_by and d.name in base and d.requires is None:
            placed[d.name] = Clock(d.name, base[d.name])
    for d in ladder.deadlines:
        if d.requires is not None and d.name in base:
            within = placed.get(d.requires.within)
            if within is None or within.at is None:
                placed[d.name] = Clock(d.name, base[d.name])
                continue
            first = _first_recorded(actions, [d.requires.action])
            timely = (first is not None and first.occurred_at is not None
                      and first.occurred_at < within.at)
            if not timely:
                timely = any(a.action == d.requires.action and a.occurred_at is None
                             and a.asserted_timely is True for a in actions)
            placed[d.name] = (Clock(d.name, base[d.name]) if timely else Clock(
                d.name, within.at,
                f"no timely {d.requires.action}: due with {d.requires.within}"))
        elif d.started_by:
            starts = [a for a in actions if a.action in d.started_by]
            if not starts:
                continue
            first = _first_recorded(starts, d.started_by)
            if first is None or first.occurred_at is None:
                placed[d.name] = Clock(d.name, None, f"{starts[0].action} instant unknown")
            else:
                res = d.resolve(first.occurred_at, calendars, attributes or {})
                meets_from = first.occurred_at
                if d.counts_before_start:  # the latest t with t + span <= the start
                    meets_from = regulatory_cap(
                        first.occurred_at, replace(d, buffer=d.counts_before_start,
                                                   variants=()), calendars) or meets_from
                placed[d.name] = Clock(
                    d.name, res.at, f"from {first.action} at {first.occurred_at.isoformat()}",
                    meets_from)
    return [placed[d.name] for d in ladder.deadlines if d.name in placed]


def assess(
    ladder: Ladder, placed: Sequence[Clock], actions: Sequence[RecordedAction], now: datetime,
    at_risk: timedelta = AT_RISK,
) -> list[Assessment]:
    """The state of each clock at ``now`` (aware UTC); see the module docstring.

    Met: an action named in ``met_by`` happened strictly before the instant (basis
    ``record``), or the source asserts it (basis ``source``). Missed: the instant passed
    without that, or the action came late (``late_s`` up to it). At risk: open and due
    within ``at_risk``. Pending: open and further out. Undetermined: only an assertion with
    nothing to say about this deadline, or a clock whose start is unknown.
    """
    actions = effective(ladder, actions)
    at = {c.name: c.at for c in placed}
    rules = {d.name: d for d in ladder.deadlines}
    out: list[Assessment] = []
    for c in placed:
        rule = rules[c.name]
        on_record = [a for a in actions if a.action in rule.met_by and a.occurred_at is not None
                     and (c.start is None or a.occurred_at >= c.start)]
        first = min(on_record, key=lambda a: (a.occurred_at, a.seq)) if on_record else None
        # the recording instant bounds only an assertion that states no timeliness: a source
        # that says timely or late is taken at its word (docs/sla.md "Imported outcomes")
        bounded = [a for a in actions if a.action in rule.met_by and a.occurred_at is None
                   and a.asserted_timely is None and a.recorded_at is not None
                   and c.at is not None and a.recorded_at < c.at]
        asserted = _asserted(ladder, actions, rule, at)
        src = rule.source
        if c.at is None:
            out.append(Assessment(c.name, None, DeadlineState.UNDETERMINED, None, None, None,
                                  src, c.rule))
        elif first is not None and first.occurred_at is not None and first.occurred_at < c.at:
            out.append(Assessment(c.name, c.at, DeadlineState.MET, Basis.RECORD, first, 0.0,
                                  src, c.rule))
        elif bounded:  # no instant given, but on the ledger before the deadline: in time
            out.append(Assessment(c.name, c.at, DeadlineState.MET, Basis.RECORD, bounded[0],
                                  0.0, src, c.rule))
        elif asserted is not None and asserted[0] is DeadlineState.MET:
            out.append(Assessment(c.name, c.at, DeadlineState.MET, Basis.SOURCE, asserted[1],
                                  0.0, src, c.rule))
        elif first is not None and first.occurred_at is not None:
            late = (first.occurred_at - c.at).total_seconds()
            out.append(Assessment(c.name, c.at, DeadlineState.MISSED, Basis.RECORD, first,
                                  late, src, c.rule))
        elif asserted is not None:
            state, by = asserted
            out.append(Assessment(c.name, c.at, state, Basis.SOURCE, by, None, src, c.rule))
        elif c.at <= now:
            out.append(Assessment(c.name, c.at, DeadlineState.MISSED, None, None,
                                  (now - c.at).total_seconds(), src, c.rule))
        else:
            state = DeadlineState.AT_RISK if c.at <= now + at_risk else DeadlineState.PENDING
            out.append(Assessment(c.name, c.at, state, None, None, 0.0, src, c.rule))
    return out


def binding(
    ladder: Ladder, placed: Sequence[Clock], actions: Sequence[RecordedAction], now: datetime,
) -> tuple[tuple[str, datetime], ...]:
    """The clocks that still cap tiers, ``((name, aware UTC), ...)`` in the ladder's order:
    a known instant and no action that met it, on time or late, on record or per the source.
    A clock missed while still open binds, so the escalation is due at once. One that a
    late action ended no longer binds, and the miss stays on record in :func:`assess`."""
    return tuple((s.name, s.at) for s in assess(ladder, placed, actions, now)
                 if s.at is not None and s.by is None
                 and s.state is not DeadlineState.UNDETERMINED)


def late_at(assessments: Iterable[Assessment]) -> list[str]:
    """Names of the deadlines missed (on record or while open), for a resolution's row."""
    return [a.name for a in assessments if a.state is DeadlineState.MISSED]
