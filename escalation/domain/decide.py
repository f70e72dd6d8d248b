"""decide(): the pure rule that turns a due escalation into a decision (the "decide" step of
the firing protocol, docs/architecture.md: claim -> decide -> record -> apply).

``decide(escalation, ladder, now, calendars)`` -> :class:`Decision`. The decision strings
(logged as ``match_decision`` and recorded in the ledger) are ``PROMOTED_TO_<TIER>`` and
``TERMINAL_ESCALATION``. The next tier's due time is
computed from the promotion time ``now`` (Redis ``TIME`` of the claim) in that tier's calendar.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from escalation.domain.calendars import CalendarRegistry, window_end
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation
from escalation.domain.ladder import Ladder
from escalation.domain.sla_timing import (
    DueCap,
    calendar_of,
    cap_due,
    cap_provenance,
    deadline_values,
    escalation_tier_cap,
    tier_window,
)
from escalation.domain.timeutil import require_aware

TERMINAL_ESCALATION = "TERMINAL_ESCALATION"
NOT_DUE = "NOT_DUE"


class DecisionKind(StrEnum):
    """What the decision does to the escalation."""

    PROMOTED = "promoted"
    TERMINAL = "terminal"
    NOT_DUE = "not_due"


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of :func:`decide`.

    Attributes:
        kind: promoted, terminal, or not_due (claimed early: nothing to record).
        match_decision: ``PROMOTED_TO_<TIER>``, ``TERMINAL_ESCALATION`` or ``NOT_DUE``.
        from_tier: tier before the decision.
        to_tier: tier after (``None`` for terminal / not due).
        next_due_at: aware UTC end of the next tier's SLA window (``None`` unless promoted).
        decided_at: aware UTC decision time (Redis TIME).
        calendar_version: version of the calendar the next due time was counted in (recorded
            in the ledger row), or None.
        regulatory_deadline: the regulatory deadline that caps the next tier (recorded in the
            promotion's ledger row and carried by the escalation), or None (docs/sla.md
            "Several regulatory deadlines").
    """

    kind: DecisionKind
    match_decision: str
    from_tier: str
    to_tier: str | None
    next_due_at: datetime | None
    decided_at: datetime
    calendar_version: str | None = None
    regulatory_deadline: datetime | None = None
    deadline_detail: dict[str, object] | None = None
    """The deadline bounding ``next_due_at`` (name, citation, instant, whether it capped
    it), recorded in the promotion row's ``details["deadline"]``; None without one."""


def decide(
    escalation: Escalation, ladder: Ladder, now: datetime, calendars: CalendarRegistry
) -> Decision:
    """Decide what a claimed escalation becomes at ``now``.

    Args:
        escalation: the claimed escalation (its ``ladder_version`` must equal ``ladder.version``).
        ladder: the escalation's pinned ladder version.
        now: aware decision time (Redis TIME from the claim script).
        calendars: calendars by id, for the next tier's SLA window.

    Raises:
        InvalidInput: ``now`` naive, or ``ladder`` is not the escalation's pinned version.
        UnknownTier: the escalation's tier is not in its pinned ladder version.
    """
    now = require_aware(now, "now")
    if (escalation.ladder, escalation.ladder_version) != (ladder.name, ladder.version):
        raise InvalidInput(
            f"escalation is pinned to {escalation.ladder_key}, refusing to decide with {ladder.key}"
        )
    current = ladder.tier(escalation.tier)
    calendars = escalation.calendars(calendars)  # the escalation's institution zone/calendar
    if escalation.due_at > now:
        return Decision(DecisionKind.NOT_DUE, NOT_DUE, current.id, None, None, now)
    nxt = ladder.next_tier(current.id)
    if nxt is None:  # the row still names the calendar the breached window counted in
        version = calendar_of(current.window, calendars).version
        return Decision(DecisionKind.TERMINAL, TERMINAL_ESCALATION, current.id, None, None, now,
                        version)
    # The materiality band's window_factor shortens the window; the regulatory deadline minus
    # its buffer caps the due time (escalation.domain.sla_timing).
    window = tier_window(ladder, nxt.id, escalation.materiality.amount)
    due = window_end(now, window, calendars)
    # The cap comes from the deadline(s) that cap the *next* tier (a ladder may
    # carry several, e.g. CFPB 15 days for the response tiers, 60 days for the terminal one).
    cap, deadline = escalation_tier_cap(
        ladder, nxt.id, escalation.deadlines, escalation.regulatory_deadline, calendars
    )
    uncapped = due
    due = cap_due(due, cap, now)
    version = calendar_of(window, calendars).version
    detail = cap_provenance(
        ladder, nxt.id,
        deadline_values(ladder, escalation.deadlines, escalation.regulatory_deadline),
        calendars, DueCap(uncapped, due, at=deadline),
    ) if ladder.deadlines else None
    return Decision(
        DecisionKind.PROMOTED, nxt.decision_name, current.id, nxt.id, due, now, version,
        deadline, detail,
    )
