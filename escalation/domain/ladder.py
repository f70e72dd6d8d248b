"""Tiers and ladders (pure). ``escalation.adapters.ladder_files`` parses the files in ``ladders/``.

A ladder is an ordered list of tiers with stable ids and strictly increasing authority
rank; the last tier is terminal. An escalation is pinned to the ladder *version* it entered
on (DESIGN.md "Ladders and ladder migrations"); the seed's warning (seed 000, configuration
section) is why "next tier" is never looked up in any other version.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from escalation.domain.calendars import CalendarRegistry, SlaWindow, WindowUnit, window_end
from escalation.domain.errors import LadderError, UnknownTier


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
        """The seed's decision string for a promotion into this tier: ``PROMOTED_TO_<ID>``."""
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
class RegulatoryDeadline:
    """A deadline fixed by law or scheme rules, anchored on an external event (domain.md 0.1).

    Attributes:
        name: e.g. ``"determine_or_provisionally_credit"`` (Reg E 1005.11(c)(1)).
        anchor: the event that starts the clock, e.g. ``"notice_of_error_received"``.
        window: the deadline as a window from the anchor (amount, unit, calendar).
        buffer: safety margin in ``window.unit`` / ``window.calendar`` (>= 0): the tier windows
            must end at least this long before the deadline (``escalation ladder check``).
        caps: ids of the tiers whose due times this deadline caps (issue 4 A: a ladder may
            carry several deadlines, e.g. CFPB 15 days for the response tiers, 60 days for the
            terminal one). Empty = every tier.
        source: citation, e.g. ``"12 CFR 1005.11(c)(1)"`` ("" when the file gives none).
    """

    name: str
    anchor: str
    window: SlaWindow
    buffer: int = 0
    caps: tuple[str, ...] = ()
    source: str = ""

    def applies_to(self, tier_id: str) -> bool:
        """True when this deadline caps the due time of tier ``tier_id``."""
        return not self.caps or tier_id in self.caps

    def deadline(self, anchor_at: datetime, calendars: CalendarRegistry) -> datetime:
        """Aware UTC deadline for an anchor event at ``anchor_at``.

        Raises:
            InvalidInput: naive ``anchor_at`` or an unknown calendar.
        """
        return window_end(anchor_at, self.window, calendars)


DUE_KEEP = "keep"
DUE_FROM_TIER_ENTRY = "from_tier_entry"


@dataclass(frozen=True, slots=True)
class MigrationPolicy:
    """How ``escalation ladder apply`` treats pending escalations migrated onto this version.

    From the file's optional ``[migration]`` table (issue 3 point 6; domain.md 4.2 rows 2-3).

    Attributes:
        recompute_due: ``"keep"`` (default: the due time is unchanged) or
            ``"from_tier_entry"`` (due = tier entry time + the new tier's window).
        grace: when a recomputed due time is earlier than the current one (window
            shortened), the due time is ``max(recomputed, now + grace)`` -- never a burst of
            retroactive breaches -- and never later than the current due time.
    """

    recompute_due: str = DUE_KEEP
    grace: SlaWindow = field(default_factory=lambda: SlaWindow(1, WindowUnit.CALENDAR_HOURS))


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
        deadlines: every regulatory deadline of the ladder (issue 4 A), in file order; built
            from ``regulatory`` when not given (and ``regulatory`` = ``deadlines[0]``).
        checksum: SHA-256 hex of the source file bytes ("" when built in code).
        source: the file it was loaded from, for error messages ("" when built in code).
        migration: how a migration onto this version recomputes due times (issue 3).
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
        ranks = [t.rank for t in self.tiers]
        if any(b <= a for a, b in itertools.pairwise(ranks)):
            raise LadderError(f"{self.label}: tiers: ranks must be strictly increasing")
        if self.terminal_tier != ids[-1]:
            raise LadderError(
                f"{self.label}: terminal_tier: must be the last tier "
                f"({ids[-1]!r}), got {self.terminal_tier!r}"
            )

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
            f"unknown tier {tier_id!r} for ladder {self.key}; tiers: {', '.join(self.tier_ids)}"
        )

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

    def is_terminal(self, tier_id: str) -> bool:
        """True when ``tier_id`` is this ladder's terminal tier. Raises UnknownTier."""
        return self.tier(tier_id).id == self.terminal_tier
