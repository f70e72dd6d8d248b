"""What changed between two versions of a ladder, in words (the console's ladders page).

``diff(old, new)`` compares tiers (name, rank, window, pre-breach warnings), regulatory
deadlines (anchor, window, buffer, caps, citation, variants, billing cycles, ``met_by``,
``started_by``, ``requires``: docs/adr/0010-obligations-and-resolution.md), actions (name,
money, full amount, citation) and the ladder-wide fields (terminal tier, tier map,
materiality bands, institution zone and calendar). Items are matched by id (tiers, actions)
or name (deadlines); nothing is inferred about renames. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from escalation.domain.calendars import SlaWindow
from escalation.domain.ladder import ActionDef, Ladder, RegulatoryDeadline, Tier

T = TypeVar("T")


class Change(StrEnum):
    """How one item differs between the two versions."""

    ADDED = "added"
    REMOVED = "removed"
    CHANGED = "changed"


@dataclass(frozen=True, slots=True)
class Entry:
    """One item (tier, deadline or action) that was added, removed or changed.

    Attributes:
        change: added, removed or changed.
        key: the tier or action id, or the deadline name.
        lines: for added/removed, the item's description (one fact a line); for changed,
            one ``field: old -> new`` line per field that differs.
    """

    change: Change
    key: str
    lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LadderDiff:
    """The differences from ``old_version`` to ``new_version`` of ``ladder`` (empty tuples:
    nothing of that kind changed)."""

    ladder: str
    old_version: int
    new_version: int
    ladder_fields: tuple[str, ...]
    tiers: tuple[Entry, ...]
    deadlines: tuple[Entry, ...]
    actions: tuple[Entry, ...]

    @property
    def empty(self) -> bool:
        """True when the two versions define the same ladder (for the fields compared)."""
        return not (self.ladder_fields or self.tiers or self.deadlines or self.actions)


def window_text(w: SlaWindow) -> str:
    """``10 business days (institution)``: a window in words."""
    return f"{w.amount} {w.unit.value.replace('_', ' ')} ({w.calendar})"


def _list(values: Iterable[str]) -> str:
    items = list(values)
    return ", ".join(items) if items else "none"


def tier_lines(t: Tier) -> tuple[str, ...]:
    """A tier described one fact a line (name, rank, window, warnings)."""
    return (f"name: {t.name}", f"rank: {t.rank}", f"window: {window_text(t.window)}",
            f"warn at: {_list(str(f) for f in t.warn_at)}")


def _caps(d: RegulatoryDeadline) -> str:
    return _list(d.caps) if d.caps else "every tier"


def _requires(d: RegulatoryDeadline) -> str:
    if d.requires is None:
        return "none"
    return f"{d.requires.action} before {d.requires.within}"


def _variants(d: RegulatoryDeadline) -> str:
    return _list(f"{window_text(v.window)} when {' or '.join(v.when_any)}"
                 + (f" ({v.source})" if v.source else "") for v in d.variants)


def deadline_lines(d: RegulatoryDeadline) -> tuple[str, ...]:
    """A regulatory deadline described one fact a line: anchor, window, buffer, caps,
    citation, variants, billing cycles, met_by, started_by, requires."""
    lines = [f"anchor: {d.anchor}", f"window: {window_text(d.window)}",
             f"buffer: {d.buffer}", f"caps: {_caps(d)}", f"citation: {d.source or 'none'}"]
    if d.variants:
        lines.append(f"variants: {_variants(d)}")
    if d.billing_cycles:
        lines.append(f"billing cycles: {d.billing_cycles}")
    lines += [f"met by: {_list(d.met_by)}", f"started by: {_list(d.started_by)}",
              f"requires: {_requires(d)}"]
    return tuple(lines)


def action_lines(a: ActionDef) -> tuple[str, ...]:
    """An action described one fact a line (name, money, full amount and the currency it is
    compared in, citation)."""
    return (f"name: {a.name}", f"money: {'yes' if a.money else 'no'}",
            f"full amount: {f'yes, in {a.currency}' if a.full_amount else 'no'}",
            f"citation: {a.source or 'none'}")


def _changed(old: Sequence[str], new: Sequence[str]) -> tuple[str, ...]:
    """``field: old -> new`` for the described lines that differ (same fields both sides;
    a field only one side has is shown against ``none``)."""
    before = dict(line.split(": ", 1) for line in old)
    after = dict(line.split(": ", 1) for line in new)
    fields = list(before) + [f for f in after if f not in before]
    return tuple(f"{f}: {before.get(f, 'none')} -> {after.get(f, 'none')}"
                 for f in fields if before.get(f) != after.get(f))


def _entries(old: Sequence[T], new: Sequence[T], key: Callable[[T], str],
             describe: Callable[[T], tuple[str, ...]]) -> tuple[Entry, ...]:
    before = {key(x): x for x in old}
    after = {key(x): x for x in new}
    out: list[Entry] = []
    for k, x in after.items():
        if k not in before:
            out.append(Entry(Change.ADDED, k, describe(x)))
    for k, x in before.items():
        if k not in after:
            out.append(Entry(Change.REMOVED, k, describe(x)))
        else:
            lines = _changed(describe(x), describe(after[k]))
            if lines:
                out.append(Entry(Change.CHANGED, k, lines))
    return tuple(out)


def _ladder_fields(old: Ladder, new: Ladder) -> tuple[str, ...]:
    def bands(lad: Ladder) -> str:
        return _list(f"{b.name} >= {b.min_amount}"
                     + (f" starts in {b.start_tier}" if b.start_tier else "")
                     + (f" x{b.window_factor}" if b.window_factor != 1 else "")
                     for b in lad.bands)

    def tier_map(lad: Ladder) -> str:
        return _list(f"{k} -> {v}" for k, v in sorted(lad.tier_map.items()))

    pairs = (("terminal tier", old.terminal_tier, new.terminal_tier),
             ("tier map", tier_map(old), tier_map(new)),
             ("materiality bands", bands(old), bands(new)),
             ("institution zone", old.institution_timezone or "deployment's",
              new.institution_timezone or "deployment's"),
             ("institution calendar", old.institution_calendar or "deployment's",
              new.institution_calendar or "deployment's"))
    return tuple(f"{name}: {a} -> {b}" for name, a, b in pairs if a != b)


def diff(old: Ladder, new: Ladder) -> LadderDiff:
    """The differences from ``old`` to ``new`` (two versions of one ladder, either order).

    Raises:
        ValueError: the two are versions of different ladders.
    """
    if old.name != new.name:
        raise ValueError(f"cannot compare ladder {old.name!r} with ladder {new.name!r}")
    return LadderDiff(
        ladder=old.name, old_version=old.version, new_version=new.version,
        ladder_fields=_ladder_fields(old, new),
        tiers=_entries(old.tiers, new.tiers, lambda t: t.id, tier_lines),
        deadlines=_entries(old.deadlines, new.deadlines, lambda d: d.name, deadline_lines),
        actions=_entries(old.actions, new.actions, lambda a: a.id, action_lines),
    )
