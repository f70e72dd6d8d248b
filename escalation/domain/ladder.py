"""Tiers and ladders (pure). Files in ``ladders/`` are parsed by ``escalation.adapters.ladder_files``.

A ladder is an ordered list of tiers with stable ids and strictly increasing authority
rank; the last tier is terminal. An escalation is pinned to the ladder *version* it entered
on (DESIGN.md "Ladders and ladder migrations"); the seed's warning (seed 000, configuration
section) is why "next tier" is never looked up in any other version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from escalation.domain.calendars import SlaWindow
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
        checksum: SHA-256 hex of the source file bytes ("" when built in code).
    """

    name: str
    version: int
    tiers: tuple[Tier, ...]
    terminal_tier: str
    previous_version: int | None = None
    tier_map: Mapping[str, str] = field(default_factory=dict)
    bands: tuple[MaterialityBand, ...] = ()
    regulatory: Mapping[str, object] = field(default_factory=dict)
    checksum: str = ""

    def __post_init__(self) -> None:
        if not self.tiers:
            raise LadderError(f"ladder {self.name} v{self.version}: tiers: at least one tier")
        ids = [t.id for t in self.tiers]
        if len(set(ids)) != len(ids):
            raise LadderError(f"ladder {self.name} v{self.version}: tiers: duplicate tier id")
        ranks = [t.rank for t in self.tiers]
        if any(b <= a for a, b in zip(ranks, ranks[1:], strict=False)):
            raise LadderError(
                f"ladder {self.name} v{self.version}: tiers: ranks must be strictly increasing"
            )
        if self.terminal_tier != ids[-1]:
            raise LadderError(
                f"ladder {self.name} v{self.version}: terminal_tier: must be the last tier "
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

    def is_terminal(self, tier_id: str) -> bool:
        """True when ``tier_id`` is this ladder's terminal tier. Raises UnknownTier."""
        return self.tier(tier_id).id == self.terminal_tier
