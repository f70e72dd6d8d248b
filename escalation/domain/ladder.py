"""Tiers and ladders (pure). ``escalation.adapters.ladder_files`` parses the files in ``ladders/``.

A ladder is an ordered list of tiers with stable ids and strictly increasing authority
rank; the last tier is terminal. An escalation is pinned to the ladder *version* it entered
on (docs/ladders.md; ADR 0004). "Next tier" is never looked up in any other version: a
ladder change would otherwise silently change where a pending escalation goes next, so the
ladder changes only through a reviewed migration, never by editing configuration.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from escalation.domain.calendars import MAX_WINDOW, CalendarRegistry, SlaWindow, WindowUnit
from escalation.domain.errors import InvalidInput, LadderError, LadderNotFound, UnknownTier


@dataclass(frozen=True, slots=True)
class Tier:
    """One review tier.

    Attributes:
        id: stable identifier (``[a-z][a-z0-9_]*``), never reused for another meaning.
        name: display name (may change between versions).
        rank: authority rank; strictly increasing along the ladder.
        window: the SLA window an escalation may spend in this tier before it breaches.
        warn_at: fractions of the window (0 < f < 1) at which a pre-breach warning fires.
    """

    id: str
    name: str
    rank: int
    window: SlaWindow
    warn_at: tuple[Decimal, ...] = ()

    @property
    def decision_name(self) -> str:
        """The decision string (``match_decision``) for a promotion into this tier:
        ``PROMOTED_TO_<ID>``."""
        return f"PROMOTED_TO_{self.id.upper()}"


@dataclass(frozen=True, slots=True)
class MaterialityBand:
    """Escalations with materiality >= ``min_amount`` start in ``start_tier`` (if set) and have
    their windows scaled by ``window_factor`` (0 < factor <= 1)."""

    name: str
    min_amount: Decimal
    start_tier: str | None = None
    window_factor: Decimal = Decimal(1)


@dataclass(frozen=True, slots=True)
class DeadlineVariant:
    """A different length of a regulatory deadline for disputes with a given attribute.

    Attributes:
        when_any: boolean dispute attributes; the variant applies when any of them is true
            (e.g. ``("new_account", "point_of_sale", "foreign_initiated")``).
        window: the deadline window for such disputes (from the same anchor).
        source: citation of the variant's rule, e.g. ``"12 CFR 1005.11(c)(3)(i)"``.
    """

    when_any: tuple[str, ...]
    window: SlaWindow
    source: str = ""


RESOLUTION = "resolution"
"""The reserved action id naming a dispute's resolution (``resolve``, or the older ``cancel``)
in a deadline's ``met_by`` (docs/adr/0010-obligations-and-resolution.md)."""


@dataclass(frozen=True, slots=True)
class ActionDef:
    """An action a dispute on this ladder may record (``[[actions]]`` in the ladder file).

    Attributes:
        id: stable identifier (``[a-z][a-z0-9_]*``), e.g. ``"provisional_credit"``; never
            ``"resolution"`` (reserved).
        name: display name, e.g. ``"Provisional credit"``.
        money: True when the action moves money and must carry an amount and a currency.
        source: citation of the rule that requires or allows it (``""`` if none).
        full_amount: a money action that meets a deadline only when it covers the disputed
            amount (Reg E 12 CFR 1005.11(c)(2)(i): a provisional credit "in the amount of the
            alleged error"); a smaller one is recorded as partial and meets nothing.
        after: an action id that must be on record before this one (a reversal of a
            provisional credit needs the credit), or None.
        currency: for a ``full_amount`` action, the ISO 4217 code of the disputed amounts
            it is compared with (materiality carries no currency; ``"USD"`` unless the
            ladder file says otherwise: the shipped full-amount rule is Reg E's, for US
            consumer accounts). An amount in another currency is not compared: it is
            recorded as ``amount_unchecked``.
    """

    id: str
    name: str
    money: bool = False
    source: str = ""
    full_amount: bool = False
    after: str | None = None
    currency: str = "USD"


@dataclass(frozen=True, slots=True)
class Requirement:
    """A deadline's window is available only when ``action`` happened before the deadline
    ``within``; otherwise the deadline falls at ``within``'s instant.

    Reg E 12 CFR 1005.11(c)(2)(i): the 45-day investigation period is available only when the
    account was provisionally credited within the 10 business days of (c)(1).
    """

    action: str
    within: str


BILLING_CYCLE_ATTRIBUTE = "cycle_closing_day"
"""Dispute attribute holding the account's billing-cycle closing day of month (1-31)."""


@dataclass(frozen=True, slots=True)
class ResolvedDeadline:
    """One regulatory deadline as computed for one dispute.

    Attributes:
        name: the deadline's name in the ladder file.
        at: aware UTC instant; the deadline is met by anything strictly before it.
        source: citation of the rule that set it (the variant's or billing cycles' when one
            applied).
        rule: human text of the rule applied, e.g. ``"2 complete billing cycles (closing day
            6)"`` or ``"90 calendar_days (institution)"``.
    """

    name: str
    at: datetime
    source: str
    rule: str


@dataclass(frozen=True, slots=True)
class RegulatoryDeadline:
    """A deadline fixed by law or scheme rules, anchored on an external event (e.g. the
    notice of error received), not on tier entry; docs/ladders.md "Example ladders".

    Attributes:
        name: e.g. ``"determine_or_provisionally_credit"`` (Reg E 1005.11(c)(1)).
        anchor: the event that starts the clock, e.g. ``"notice_of_error_received"``.
        window: the deadline as a window from the anchor (amount, unit, calendar). With
            ``billing_cycles`` it is the outer cap ("never later than 90 days").
        buffer: safety margin in ``window.unit`` / ``window.calendar`` (>= 0, at most
            ``MAX_WINDOW`` of the unit, as a window): the tier windows must end at least this
            long before the deadline (``escalation ladder check``).
        caps: ids of the tiers whose due times this deadline caps (a ladder may carry several
            deadlines, e.g. CFPB 15 days for the response tiers, 60 days for the
            terminal one). Empty = every tier.
        source: citation, e.g. ``"12 CFR 1005.11(c)(1)"`` ("" when the file gives none).
        billing_cycles: > 0 = the deadline is the end of the Nth complete billing cycle after
            the anchor (Reg Z 12 CFR 1026.13(c)(2)), capped by ``window``; needs the dispute
            attribute ``cycle_closing_day``.
        variants: longer (or shorter) windows for disputes with given boolean attributes; the
            first variant whose attribute is true applies (Reg E 1005.11(c)(3)).
        met_by: ids of the actions that meet this deadline (:data:`RESOLUTION` = the
            dispute's resolution); the default, resolution only, is what a deadline meant
            before ladders named actions.
        started_by: action ids (:data:`RESOLUTION` allowed): the clock runs from the first
            recorded instant of any of them (never computed at enqueue); empty = from the
            ``anchor`` event.
        counts_before_start: for an action clock, how long before its start (in the
            deadline's unit and calendar) an action still meets it (Reg E comment
            11(d)(2)-1: the notice of a reversal may go out five business days before the
            debit); 0 = only an action at or after the start meets it.
        requires: a :class:`Requirement` (conditional window), or None.

    Raises:
        InvalidInput: a negative, non-integer or longer ``buffer``.
    """

    name: str
    anchor: str
    window: SlaWindow
    buffer: int = 0
    caps: tuple[str, ...] = ()
    source: str = ""
    billing_cycles: int = 0
    variants: tuple[DeadlineVariant, ...] = ()
    met_by: tuple[str, ...] = (RESOLUTION,)
    started_by: tuple[str, ...] = ()
    requires: Requirement | None = None
    counts_before_start: int = 0

    def __post_init__(self) -> None:
        # The buffer is counted like a window (in the deadline's unit and calendar), so it
        # has a window's bound: a longer one is a typo and overflows date arithmetic in
        # `ladder check` and when a worker caps a due time.
        buffer, unit = self.buffer, self.window.unit
        if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 0:
            raise InvalidInput(f"buffer must be a non-negative integer, got {buffer!r}")
        limit = MAX_WINDOW[unit]
        if buffer > limit:
            raise InvalidInput(f"buffer {buffer} {unit} is longer than about 100 years "
                               f"(at most {limit})")

    def applies_to(self, tier_id: str) -> bool:
        """True when this deadline caps the due time of tier ``tier_id``."""
        return not self.caps or tier_id in self.caps

    @property
    def needs(self) -> tuple[str, ...]:
        """Dispute attributes this deadline needs to be computed (sorted, no duplicates)."""
        names = {a for v in self.variants for a in v.when_any}
        if self.billing_cycles:
            names.add(BILLING_CYCLE_ATTRIBUTE)
        return tuple(sorted(names))

    def deadline(
        self, anchor_at: datetime, calendars: CalendarRegistry,
        attributes: Mapping[str, object] | None = None,
    ) -> datetime:
        """Aware UTC deadline for an anchor event at ``anchor_at`` (see :meth:`resolve`)."""
        return self.resolve(anchor_at, calendars, attributes).at

    def resolve(
        self, anchor_at: datetime, calendars: CalendarRegistry,
        attributes: Mapping[str, object] | None = None,
    ) -> ResolvedDeadline:
        """This deadline for one dispute (escalation.domain.deadline_rules).

        Raises:
            InvalidInput: naive ``anchor_at``, unknown calendar, or a needed attribute is
                missing or malformed.
        """
        from escalation.domain.deadline_rules import resolve_deadline

        return resolve_deadline(self, anchor_at, calendars, attributes or {})


DUE_KEEP = "keep"
DUE_FROM_TIER_ENTRY = "from_tier_entry"


@dataclass(frozen=True, slots=True)
class MigrationPolicy:
    """How ``escalation ladder apply`` treats pending escalations migrated onto this version.

    From the file's optional ``[migration]`` table (docs/ladders.md "Migration
    semantics": lengthened and shortened windows).

    Attributes:
        recompute_due: ``"keep"`` (default: the due time is unchanged) or
            ``"from_tier_entry"`` (due = tier entry time + the new tier's window).
        grace: when the window is shortened, the due time is ``max(recomputed, now +
            grace)`` -- never a burst of retroactive breaches -- and never later than the
            current due time (``domain.ladder_plan``).
    """

    recompute_due: str = DUE_KEEP
    grace: SlaWindow = field(default_factory=lambda: SlaWindow(1, WindowUnit.CALENDAR_HOURS))


def _check_deadline_actions(
    where: str, d: RegulatoryDeadline, acts: list[str], by_name: Mapping[str, RegulatoryDeadline],
) -> None:
    """One deadline's ``met_by`` / ``started_by`` / ``requires`` name declared actions and an
    anchor-based deadline. Raises LadderError naming the field."""
    declared = ", ".join(acts) or "none"
    unknown = [a for a in d.met_by if a not in acts and a != RESOLUTION]
    if not d.met_by:
        raise LadderError(f"{where}.met_by: at least one action")
    if unknown:
        raise LadderError(f"{where}.met_by: unknown action(s) {', '.join(unknown)}; declared: "
                          f"{declared} (and {RESOLUTION})")
    unknown = [a for a in d.started_by if a not in acts and a != RESOLUTION]
    if unknown:
        raise LadderError(f"{where}.started_by: unknown action(s) {', '.join(unknown)}; "
                          f"declared: {declared} (and {RESOLUTION})")
    if d.counts_before_start and not d.started_by:
        raise LadderError(f"{where}.counts_before_start: only an action clock (started_by) "
                          "has a start to count before")
    if d.requires is None:
        return
    if d.requires.action not in acts:
        raise LadderError(f"{where}.requires.action: unknown action {d.requires.action!r}; "
                          f"declared: {declared}")
    target = by_name.get(d.requires.within)
    if target is None or target.started_by or target is d:
        raise LadderError(f"{where}.requires.within: {d.requires.within!r} is not another "
                          "anchor-based deadline of this ladder")
    if d.started_by:
        raise LadderError(f"{where}.requires: a clock started by an action cannot also be "
                          "conditional")


@dataclass(frozen=True, slots=True)
class Ladder:
    """One version of a ladder.

    Attributes:
        name: ladder name, e.g. ``"dispute_review"``.
        version: positive integer; versions of one ladder are contiguous from 1.
        tiers: tiers in escalation order; the last one is ``terminal_tier``.
        terminal_tier: id of the last tier; an escalation due in it is a TERMINAL_ESCALATION.
        previous_version: the version this one replaces (``None`` for version 1).
        tier_map: for a new version, old tier id -> new tier id for removed/renamed tiers.
        bands: materiality bands, highest ``min_amount`` first.
        regulatory: the first (primary) regulatory deadline, if any; kept for single-deadline
            callers. ``deadlines`` holds all of them.
        deadlines: every regulatory deadline of the ladder, in file order; built
            from ``regulatory`` when not given (and ``regulatory`` = ``deadlines[0]``).
        checksum: SHA-256 hex of the source file bytes ("" when built in code).
        source: the file it was loaded from, for error messages ("" when built in code).
        migration: how a migration onto this version recomputes due times.
        institution_timezone / institution_calendar: this version's override of the
            deployment's institution zone / calendar (``[institution]`` in the file; None =
            the deployment setting). An escalation's own values win over both.
        actions: the actions a dispute on this version may record (``[[actions]]``).
        outcomes: the resolution outcome codes this version admits (empty = every code of
            ``domain.obligations.Outcome``).
    """

    name: str
    version: int
    tiers: tuple[Tier, ...]
    terminal_tier: str
    previous_version: int | None = None
    tier_map: Mapping[str, str] = field(default_factory=dict)
    bands: tuple[MaterialityBand, ...] = ()
    regulatory: RegulatoryDeadline | None = None
    checksum: str = ""
    source: str = ""
    migration: MigrationPolicy = field(default_factory=MigrationPolicy)
    deadlines: tuple[RegulatoryDeadline, ...] = ()
    institution_timezone: str | None = None
    institution_calendar: str | None = None
    actions: tuple[ActionDef, ...] = ()
    outcomes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.deadlines and self.regulatory is not None:
            object.__setattr__(self, "deadlines", (self.regulatory,))
        elif self.deadlines and self.regulatory is None:
            object.__setattr__(self, "regulatory", self.deadlines[0])
        names = [d.name for d in self.deadlines]
        if len(set(names)) != len(names):
            raise LadderError(f"{self.label}: regulatory: duplicate deadline name")
        if not self.tiers:
            raise LadderError(f"{self.label}: tiers: at least one tier")
        ids = [t.id for t in self.tiers]
        if len(set(ids)) != len(ids):
            raise LadderError(f"{self.label}: tiers: duplicate tier id")
        for d in self.deadlines:
            unknown = [c for c in d.caps if c not in ids]
            if unknown:
                raise LadderError(f"{self.label}: regulatory.{d.name}.caps: unknown tier(s) "
                                  f"{', '.join(unknown)}")
        self._check_obligations()
        ranks = [t.rank for t in self.tiers]
        if any(b <= a for a, b in itertools.pairwise(ranks)):
            raise LadderError(f"{self.label}: tiers: ranks must be strictly increasing")
        if self.terminal_tier != ids[-1]:
            raise LadderError(
                f"{self.label}: terminal_tier: must be the last tier "
                f"({ids[-1]!r}), got {self.terminal_tier!r}"
            )

    def _check_obligations(self) -> None:
        """Every action a deadline names is declared; ``requires.within`` names an
        anchor-based deadline; no cycle among ``requires.within`` references."""
        acts = [a.id for a in self.actions]
        if RESOLUTION in acts:
            raise LadderError(f"{self.label}: actions: {RESOLUTION!r} is reserved "
                              "(the dispute's resolution)")
        if len(set(acts)) != len(acts):
            raise LadderError(f"{self.label}: actions: duplicate action id")
        for a in self.actions:
            if a.after is not None and a.after not in acts:
                raise LadderError(f"{self.label}: actions.{a.id}.after: unknown action "
                                  f"{a.after!r}")
        by_name = {d.name: d for d in self.deadlines}
        for d in self.deadlines:
            _check_deadline_actions(f"{self.label}: regulatory.{d.name}", d, acts, by_name)
        for d in self.deadlines:  # cycles among requires.within
            seen = [d.name]
            nxt = d.requires.within if d.requires else None
            while nxt is not None:
                if nxt in seen:
                    raise LadderError(f"{self.label}: regulatory.{d.name}.requires.within: "
                                      f"cycle {' -> '.join([*seen, nxt])}")
                seen.append(nxt)
                req = by_name[nxt].requires
                nxt = req.within if req else None

    def action(self, action_id: str) -> ActionDef:
        """The declared action ``action_id``.

        Raises:
            InvalidInput: this ladder version declares no such action (the message lists
                the declared ones).
        """
        for a in self.actions:
            if a.id == action_id:
                return a
        names = ", ".join(a.id for a in self.actions) or "none"
        raise InvalidInput(f"action: unknown action {action_id!r} for ladder {self.key}; "
                           f"declared: {names}", field="action")

    @property
    def key(self) -> str:
        """``"<name>@<version>"``: how the pinned version is written in Redis and logs."""
        return f"{self.name}@{self.version}"

    @property
    def tier_ids(self) -> tuple[str, ...]:
        """Tier ids in order."""
        return tuple(t.id for t in self.tiers)

    def tier(self, tier_id: str) -> Tier:
        """The tier with id ``tier_id``.

        Raises:
            UnknownTier: this ladder version has no such tier.
        """
        for t in self.tiers:
            if t.id == tier_id:
                return t
        raise UnknownTier(
            f"unknown tier {tier_id!r} for ladder {self.key}; tiers: {', '.join(self.tier_ids)}",
            field="tier")

    def next_tier(self, tier_id: str) -> Tier | None:
        """The tier after ``tier_id``, or ``None`` when ``tier_id`` is terminal.

        Raises:
            UnknownTier: ``tier_id`` is not in this version.
        """
        current = self.tier(tier_id)
        idx = self.tiers.index(current)
        return self.tiers[idx + 1] if idx + 1 < len(self.tiers) else None

    @property
    def label(self) -> str:
        """Where errors point: the source file, else ``"<name>@<version>"``."""
        return self.source or self.key

    def band_for(self, amount: Decimal) -> MaterialityBand | None:
        """The band with the highest ``min_amount <= amount`` (inclusive), or ``None``."""
        best: MaterialityBand | None = None  # first of equal maxima, as max() would pick
        for band in self.bands:
            if band.min_amount <= amount and (best is None or band.min_amount > best.min_amount):
                best = band
        return best

    def deadlines_for(self, tier_id: str) -> tuple[RegulatoryDeadline, ...]:
        """The regulatory deadlines that cap tier ``tier_id`` (possibly none)."""
        return tuple(d for d in self.deadlines if d.applies_to(tier_id))

    @property
    def needs(self) -> tuple[str, ...]:
        """Dispute attributes any of this ladder's deadlines needs (sorted)."""
        return tuple(sorted({a for d in self.deadlines for a in d.needs}))


LADDER_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
"""A well-formed ladder name: the ``<name>`` of a ladder file ``<name>.v<N>.toml``."""


def unknown_ladder(name: str, known: Iterable[str], hint: str = "") -> LadderError:
    """The error for a ladder ``name`` that no file and no release has: a
    :class:`LadderNotFound` (exit 3, code ``NOT_FOUND``) naming the ``known`` ladders, or a
    plain :class:`LadderError` (exit 2) when ``name`` is not even a well-formed ladder name
    (:data:`LADDER_NAME`). ``hint`` is appended to the message. Field ``ladder``."""
    names = ", ".join(sorted(known)) or "none"
    if not LADDER_NAME.match(name):
        return LadderError(f"ladder: {name!r} is not a ladder name (lower-case letters, digits "
                           f"and _, starting with a letter; ladders: {names}){hint}",
                           field="ladder")
    return LadderNotFound(f"unknown ladder {name!r} (ladders: {names}){hint}", field="ladder")
