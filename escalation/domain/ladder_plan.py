"""Pure planning of a ladder migration (docs/ladders.md "Migration semantics";
docs/ladder-migrations.md).

``plan_escalation(escalation, versions, target, calendars)`` says what happens to one pending
(or paused) escalation when it moves from its pinned ladder version to ``target``:

* its tier id is kept when the target still has it (a renamed tier keeps its stable id, only
  the display name changes; an inserted tier changes only the *next* tier);
* a tier removed along the way follows each version's ``tier_map``; no map -> blocked;
* the new tier's authority rank may never be lower than the current one (a reorder that
  would demote a pending escalation is blocked: a migration never takes authority away from
  a case under review);
* the due time follows the target file's ``[migration]`` policy (:class:`DuePlan`):
  ``keep``, or recomputed from the time the escalation entered its tier where its tier's
  window changed (same tier, same window for its materiality: kept). A shortened window
  gives ``min(current, max(recomputed, now + grace))``: never a burst of retroactive
  breaches, never later than it was; a lengthened one never an earlier due time
  (:func:`_due_plan`).

The due rule is part of the plan, not its value at one instant: ``apply`` resolves
``now + grace`` with Redis TIME when it writes. The plan hash (:func:`change_hash`) names the
change -- ladder, versions, file checksums, rules -- not the escalations, which move while
workers fire; apply re-plans each one at apply time.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from uuid import UUID

from escalation.domain.calendars import CalendarRegistry, SlaWindow, window_end
from escalation.domain.errors import LadderMigrationError, UnknownTier
from escalation.domain.escalation import Escalation, Status
from escalation.domain.ladder import DUE_FROM_TIER_ENTRY, Ladder
from escalation.domain.sla_timing import tier_window


class DueRule(StrEnum):
    """How the new due time is obtained."""

    KEEP = "keep"  # unchanged (paused escalations, policy "keep", or no change in length)
    RECOMPUTED = "recomputed"  # lengthened: later than the current due time, never earlier
    FLOOR = "floor"  # shortened: min(current, max(recomputed, now + grace)), never later


@dataclass(frozen=True, slots=True)
class DuePlan:
    """The due-time rule of one planned escalation.

    Attributes:
        rule: see :class:`DueRule`.
        current: the due time now (aware UTC), None for a paused escalation.
        recomputed: the due time the new window gives (see :func:`_due_plan`; capped by
            the regulatory deadline), None for ``KEEP``.
        grace: the target version's grace window (``FLOOR`` only).
    """

    rule: DueRule
    current: datetime | None
    recomputed: datetime | None = None
    grace: SlaWindow | None = None

    def resolve(self, now: datetime, calendars: CalendarRegistry) -> datetime | None:
        """The concrete due time at ``now`` (aware UTC, Redis TIME at apply)."""
        if self.rule is DueRule.KEEP or self.recomputed is None:
            return self.current
        if self.rule is DueRule.RECOMPUTED:
            return self.recomputed
        assert self.grace is not None and self.current is not None  # noqa: S101 - FLOOR has both
        floor = window_end(now, self.grace, calendars)
        return min(self.current, max(self.recomputed, floor))

    def suppressed(self, now: datetime, calendars: CalendarRegistry) -> bool:
        """True when the grace floor set the due time (see :meth:`floor_set`)."""
        return self.floor_set(self.resolve(now, calendars))

    def floor_set(self, due: datetime | None) -> bool:
        """True when ``due`` (this plan resolved at apply) is the grace floor: later than the
        shortened window's due time (a breach the migration would have made retroactive,
        suppressed) and earlier than the current one. A due time left where it was (an
        escalation already past the shortened window's end and already due) is not."""
        return (self.rule is DueRule.FLOOR and due is not None
                and due not in (self.recomputed, self.current))

    def render(self) -> str:
        """Canonical text for the plan hash (no dependence on the clock)."""
        cur = "-" if self.current is None else self.current.isoformat()
        if self.rule is DueRule.KEEP or self.recomputed is None:
            return f"keep:{cur}"
        if self.rule is DueRule.RECOMPUTED:
            return f"set:{self.recomputed.isoformat()}"
        grace = "" if self.grace is None else self.grace.describe()
        return f"floor:min({cur},max({self.recomputed.isoformat()},now+{grace}))"


@dataclass(frozen=True, slots=True)
class PlanItem:
    """One escalation that can be migrated.

    Attributes:
        dispute_id, seq: the escalation and the ledger seq the plan was made at (apply's CAS).
        status: pending or paused.
        from_version, to_version: pinned version now, target version.
        from_tier, to_tier: tier id now, tier id after.
        old_next, new_next: next tier id before/after (None = terminal tier).
        due: the due-time rule.
        deadline: for a pending escalation whose tier a regulatory deadline bounds, that
            deadline (``name``, ``citation``, ``at``, ``capped``: it cut the recomputed due
            time), recorded in the LADDER_MIGRATED row; not part of the plan hash.
    """

    dispute_id: UUID
    seq: int
    status: Status
    from_version: int
    to_version: int
    from_tier: str
    to_tier: str
    old_next: str | None
    new_next: str | None
    due: DuePlan
    deadline: dict[str, object] | None = None

    @property
    def changes(self) -> bool:
        """True when the tier, the next tier or the due time changes."""
        due_changes = self.due.rule is not DueRule.KEEP and self.due.recomputed != self.due.current
        return self.from_tier != self.to_tier or self.old_next != self.new_next or due_changes

    def render(self) -> str:
        """Canonical line for the plan hash."""
        return (
            f"{self.dispute_id}|{self.seq}|{self.status.value}|v{self.from_version}|"
            f"{self.from_tier}>{self.to_tier}|{self.due.render()}"
        )


@dataclass(frozen=True, slots=True)
class Blocked:
    """An escalation that cannot be migrated, and why (it stays on its pinned version)."""

    dispute_id: UUID
    seq: int
    from_version: int
    tier: str
    reason: str

    def render(self) -> str:
        """Canonical line for the plan hash."""
        return (
            f"{self.dispute_id}|{self.seq}|blocked|v{self.from_version}|{self.tier}|"
            f"{self.reason}"
        )


SEMANTICS = (
    "ladder-migration/2: tier id kept; removed tiers follow each version's tier_map; never "
    "a lower rank; due time per the target's [migration]; paused keep remaining time"
)
"""The planning rules, named in every plan hash: a change to them changes every hash."""


@dataclass(frozen=True, slots=True)
class MigrationPlan:
    """A dry run: what ``apply`` would do to every pending escalation of one ladder.

    Attributes:
        ladder: ladder name; ``target_version`` and ``checksum`` identify the target file.
        items: migratable escalations, sorted by dispute id.
        blocked: escalations that cannot be migrated, sorted by dispute id.
        files: ``(version, checksum)`` of every version ``1..target_version`` (the files
            whose tier maps and policies the migration follows).
    """

    ladder: str
    target_version: int
    checksum: str
    items: tuple[PlanItem, ...]
    blocked: tuple[Blocked, ...]
    files: tuple[tuple[int, str], ...] = ()

    def groups(self) -> list[tuple[str, str, int]]:
        """``(from tier, to tier, count)`` rows, sorted."""
        counts = Counter((i.from_tier, i.to_tier) for i in self.items)
        return [(a, b, n) for (a, b), n in sorted(counts.items())]

    def changed(self) -> list[PlanItem]:
        """Items whose tier, next tier or due time changes."""
        return [i for i in self.items if i.changes]

    def from_versions(self) -> list[int]:
        """The pinned versions the planned escalations are on now, ascending."""
        return sorted({i.from_version for i in self.items} | {b.from_version
                                                               for b in self.blocked})

    @property
    def plan_hash(self) -> str:
        """The change's hash (:func:`change_hash`): it names the change, not the members."""
        return change_hash(self.ladder, self.target_version, self.files)


def change_hash(ladder: str, target_version: int, files: Iterable[tuple[int, str]]) -> str:
    """SHA-256 hex naming one ladder migration: the ladder, the versions it migrates from
    (every version below the target) and to, the checksum of each of those files, and the
    planning rules (:data:`SEMANTICS`).

    It does not name the escalations: pending escalations move while workers fire, and apply
    re-validates each one at apply time, so a hash reviewed once stays valid on a busy
    system. Any edit of a file or change of the rules gives a different hash.
    """
    h = hashlib.sha256(f"{ladder}\nfrom v1..v{target_version - 1}\nto v{target_version}\n"
                       .encode())
    for version, checksum in sorted(files):
        h.update(f"v{version} {checksum}\n".encode())
    h.update(SEMANTICS.encode())
    return h.hexdigest()


def migration_path(versions: Mapping[int, Ladder], start: int, target: int) -> list[Ladder]:
    """The versions ``start+1 .. target`` in order.

    Raises:
        LadderMigrationError: a version in between has no file.
    """
    missing = [v for v in range(start + 1, target + 1) if v not in versions]
    if missing:
        raise LadderMigrationError(
            f"cannot migrate from v{start} to v{target}: no file for "
            + ", ".join(f"v{v}" for v in missing)
        )
    return [versions[v] for v in range(start + 1, target + 1)]


def map_tier(tier: str, path: Sequence[Ladder]) -> tuple[str | None, str]:
    """Follow ``tier`` through ``path``: kept where the version has it, else via ``tier_map``.

    Returns:
        ``(new tier id, "")`` or ``(None, reason)`` when a version removes it without a map.
    """
    for ladder in path:
        if tier in ladder.tier_map:
            tier = ladder.tier_map[tier]
        elif tier not in ladder.tier_ids:
            return None, (
                f"tier {tier!r} is removed in {ladder.key} and its tier_map has no entry for it"
            )
    return tier, ""


def plan_escalation(
    esc: Escalation,
    versions: Mapping[int, Ladder],
    target: Ladder,
    calendars: CalendarRegistry,
) -> PlanItem | Blocked:
    """Plan one pending/paused escalation onto ``target``.

    Args:
        esc: the escalation as PostgreSQL holds it (pinned ``ladder_version`` < target).
        versions: every version of the ladder by number (must include the pinned one).
        target: the target version.
        calendars: for the recomputed due time.

    Returns:
        A :class:`PlanItem`, or :class:`Blocked` (unknown pinned tier, removed without a
        map, or a demotion).

    Raises:
        LadderMigrationError: a version between the pinned one and the target has no file.
    """
    pinned = versions.get(esc.ladder_version)
    if pinned is None:
        return Blocked(esc.dispute_id, esc.seq, esc.ladder_version, esc.tier,
                       f"pinned version {esc.ladder}@{esc.ladder_version} has no file")
    try:
        old = pinned.tier(esc.tier)
    except UnknownTier as exc:
        return Blocked(esc.dispute_id, esc.seq, esc.ladder_version, esc.tier, str(exc))
    new_id, reason = map_tier(esc.tier, migration_path(versions, pinned.version, target.version))
    if new_id is None:
        return Blocked(esc.dispute_id, esc.seq, esc.ladder_version, esc.tier, reason)
    new = target.tier(new_id)
    if new.rank < old.rank:
        return Blocked(
            esc.dispute_id, esc.seq, esc.ladder_version, esc.tier,
            f"demotion: tier {old.id!r} (rank {old.rank}) in {pinned.key} would become "
            f"{new.id!r} (rank {new.rank}) in {target.key}; a migration never lowers authority",
        )
    old_next, new_next = pinned.next_tier(old.id), target.next_tier(new.id)
    return PlanItem(
        dispute_id=esc.dispute_id,
        seq=esc.seq,
        status=esc.status,
        from_version=esc.ladder_version,
        to_version=target.version,
        from_tier=old.id,
        to_tier=new.id,
        old_next=None if old_next is None else old_next.id,
        new_next=None if new_next is None else new_next.id,
        due=_due_plan(esc, pinned, target, new.id, esc.calendars(calendars)),
        deadline=_deadline_detail(esc, target, new.id, esc.calendars(calendars)),
    )


def _deadline_detail(
    esc: Escalation, target: Ladder, tier: str, calendars: CalendarRegistry
) -> dict[str, object] | None:
    """The regulatory deadline bounding a migrated pending escalation's due time (see
    :class:`PlanItem`), or None."""
    if esc.status is not Status.PENDING or esc.regulatory_deadline is None:
        return None
    values = dict(esc.deadlines) or {}
    rule = next((r for r in target.deadlines_for(tier)
                 if values.get(r.name, esc.regulatory_deadline) == esc.regulatory_deadline),
                None)
    if rule is None:
        return None
    capped = False
    if target.migration.recompute_due == DUE_FROM_TIER_ENTRY:
        end = window_end(esc.entered_tier_at,
                         tier_window(target, tier, esc.materiality.amount), calendars)
        capped = end > esc.regulatory_deadline
    return {"name": rule.name, "citation": rule.source,
            "at": esc.regulatory_deadline.isoformat(), "capped": capped}


def _window_changed(esc: Escalation, pinned: Ladder, target: Ladder, tier: str) -> bool:
    """True unless the escalation stays in the same tier and that tier's SLA window for its
    materiality (band factor applied) is the same in both versions."""
    if tier != esc.tier:
        return True
    amount = esc.materiality.amount
    return tier_window(pinned, esc.tier, amount) != tier_window(target, tier, amount)


def _due_plan(esc: Escalation, pinned: Ladder, target: Ladder, tier: str,
              calendars: CalendarRegistry) -> DuePlan:
    """The due rule of a migrated escalation under ``recompute_due = "from_tier_entry"``.

    The direction comes from the two windows counted from the same tier entry (each with the
    escalation's materiality band, as ``decide`` counts it, and capped by its regulatory
    deadline): ``old_end`` with the pinned version's window, ``new_end`` with the target's.

    * Equal (or the window did not change): the due time stays. It may carry what the tier
      entry does not know (time spent paused, an explicit ``due_at`` given at enqueue).
    * The due time is the old window's end (the usual case): the new one is ``new_end``.
    * Otherwise (paused time, an explicit ``due_at``): the due time moves by the same
      amount, ``due + (new_end - old_end)``: a window 6 h shorter makes it due 6 h sooner.
    * Lengthened: that later time (``RECOMPUTED``). Shortened: ``FLOOR``, resolved at apply
      as ``min(due, max(new, now + grace))``: never later than it was (an escalation already
      due stays due and fires), never a burst of retroactive breaches.

    A shortened window therefore never delays an escalation, and a lengthened one never
    brings it forward. The due time also stays when the tier and its SLA window do not
    change (:func:`_window_changed`)."""
    if esc.status is not Status.PENDING:
        return DuePlan(DueRule.KEEP, None)
    policy = target.migration
    if (policy.recompute_due != DUE_FROM_TIER_ENTRY
            or not _window_changed(esc, pinned, target, tier)):
        return DuePlan(DueRule.KEEP, esc.due_at)
    amount = esc.materiality.amount

    def end(ladder: Ladder, tier_id: str) -> datetime:
        at = window_end(esc.entered_tier_at, tier_window(ladder, tier_id, amount), calendars)
        return at if esc.regulatory_deadline is None else min(at, esc.regulatory_deadline)

    old_end, new_end = end(pinned, esc.tier), end(target, tier)
    if new_end == old_end:
        return DuePlan(DueRule.KEEP, esc.due_at)
    moved = new_end if esc.due_at == old_end else esc.due_at + (new_end - old_end)
    if esc.regulatory_deadline is not None:
        moved = min(moved, esc.regulatory_deadline)
    if moved == esc.due_at:
        return DuePlan(DueRule.KEEP, esc.due_at)
    if new_end > old_end:
        return DuePlan(DueRule.RECOMPUTED, esc.due_at, max(moved, esc.due_at))
    return DuePlan(DueRule.FLOOR, esc.due_at, moved, policy.grace)


def build_plan(
    escalations: Iterable[Escalation],
    versions: Mapping[int, Ladder],
    target: Ladder,
    calendars: CalendarRegistry,
) -> MigrationPlan:
    """Plan every escalation (those already at or past ``target.version`` are ignored)."""
    items: list[PlanItem] = []
    blocked: list[Blocked] = []
    for esc in escalations:
        if esc.ladder != target.name or esc.ladder_version >= target.version:
            continue
        planned = plan_escalation(esc, versions, target, calendars)
        (items if isinstance(planned, PlanItem) else blocked).append(planned)  # type: ignore[arg-type]
    items.sort(key=lambda i: i.dispute_id)
    blocked.sort(key=lambda b: b.dispute_id)
    files = tuple((v, ld.checksum) for v, ld in sorted(versions.items()) if v <= target.version)
    return MigrationPlan(target.name, target.version, target.checksum, tuple(items),
                         tuple(blocked), files)


def split_plan(
    escalations: Iterable[Escalation],
    versions: Mapping[int, Ladder],
    target: Ladder,
    calendars: CalendarRegistry,
) -> tuple[list[PlanItem], list[Blocked]]:
    """Plan a page of escalations of ``target``'s ladder pinned below it: (items, blocked)."""
    items: list[PlanItem] = []
    blocked: list[Blocked] = []
    for esc in escalations:
        planned = plan_escalation(esc, versions, target, calendars)
        if isinstance(planned, PlanItem):
            items.append(planned)
        else:
            blocked.append(planned)
    return items, blocked
