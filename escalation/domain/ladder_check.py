"""``escalation ladder check`` as a pure function over parsed ladders (docs/ladders.md).

Rules, each reported as ``"<file>: <field>: <problem>"``:

* versions of a ladder are contiguous from 1, and ``previous_version`` is ``version - 1``;
* exactly one terminal tier and it is the last; ranks strictly increasing; windows positive;
  every window's calendar (the migration grace's included) is known; the ``[institution]``
  zone exists and its calendar is a known base calendar;
* every tier of the previous version missing from the new one is mapped in ``tier_map``; a
  map's keys are tiers of the previous version; no map lowers authority (new rank < old);
* an applied version's checksum is unchanged (a released file is never edited: a change is
  a new version, ADR 0004);
* with a regulatory deadline, the tier windows chained from the anchor end no later than the
  deadline minus its buffer (the deadline is fixed by law or scheme rules from an external
  anchor event, docs/ladders.md "Example ladders"). Business calendars make that depend on the
  anchor, so it is checked for anchors every ``ANCHOR_STEP`` across ``ANCHOR_SPAN`` from
  ``ANCHOR_FROM`` (2026-2030), and the worst case is reported. A deadline that depends on
  dispute attributes (Reg E variants, Reg Z billing cycles) is checked for every attribute
  variant: each combination of its boolean attributes and every billing-cycle closing day
  1-31 (:func:`attribute_variants`).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta

from escalation.domain.calendars import (
    INSTITUTION,
    CalendarRegistry,
    WindowUnit,
    builtin_calendars,
    scoped_calendars,
    window_end,
    zone,
)
from escalation.domain.errors import InvalidInput
from escalation.domain.ladder import Ladder, RegulatoryDeadline

ANCHOR_FROM = datetime(2026, 1, 1, tzinfo=UTC)
ANCHOR_SPAN = datetime(2031, 1, 1, tzinfo=UTC) - ANCHOR_FROM  # anchors across 2026-2030
ANCHOR_STEP = timedelta(hours=7)  # coprime with 24: anchors visit every hour of the day

RegulatoryFitCheck = Callable[[Ladder, RegulatoryDeadline, CalendarRegistry], list[str]]
"""How :func:`check_ladders` checks one regulatory deadline of one ladder version:
:func:`check_regulatory_fit`, or something that answers as it does (the ladder-file
adapter's memo of the sweep, ``adapters.regulatory_fit_memo``)."""


def check_ladders(
    ladders: list[Ladder],
    applied_checksums: Mapping[tuple[str, int], str] | None = None,
    calendars: CalendarRegistry | None = None,
    *,
    fit_check: RegulatoryFitCheck | None = None,
) -> list[str]:
    """All problems found in ``ladders`` (every version of every ladder being checked).

    Args:
        ladders: parsed ladder versions (``Ladder.source`` names the file in messages).
        applied_checksums: ``(name, version) -> SHA-256 hex`` recorded when applied.
        calendars: calendars by id; default ``builtin_calendars()`` (utc, us_federal_reserve).
        fit_check: checks one regulatory deadline of a version that passed every other
            rule; None = :func:`check_regulatory_fit`, run every time (this module keeps
            nothing between calls).

    Returns:
        Error lines, empty when everything is valid. Never raises for a bad ladder.
    """
    if calendars is None:
        calendars = builtin_calendars()
    fit = check_regulatory_fit if fit_check is None else fit_check
    errors: list[str] = []
    by_name: dict[str, dict[int, Ladder]] = defaultdict(dict)
    for ladder in ladders:
        if ladder.version in by_name[ladder.name]:
            errors.append(f"{ladder.label}: version: {ladder.key} is defined twice")
        by_name[ladder.name][ladder.version] = ladder
    for name, versions in sorted(by_name.items()):
        missing = sorted(set(range(1, max(versions) + 1)) - set(versions))
        if missing:
            errors.append(
                f"{name}: version: versions must be contiguous from 1; missing "
                + ", ".join(f"v{v}" for v in missing)
            )
        for version in sorted(versions):
            ladder = versions[version]
            errors.extend(_check_one(ladder, calendars, fit))
            previous = versions.get(version - 1)
            if previous is not None:
                errors.extend(_check_map(previous, ladder))
    errors.extend(_check_checksums(by_name, applied_checksums or {}))
    return errors


def _check_one(ladder: Ladder, calendars: CalendarRegistry,
               fit: RegulatoryFitCheck) -> list[str]:
    label, errors = ladder.label, []
    expected = None if ladder.version == 1 else ladder.version - 1
    if ladder.previous_version != expected:
        errors.append(f"{label}: previous_version: must be {expected} for v{ladder.version}")
    terminal = [i for i, t in enumerate(ladder.tiers) if t.id == ladder.terminal_tier]
    if terminal != [len(ladder.tiers) - 1]:
        errors.append(f"{label}: terminal_tier: exactly one terminal tier, and it is the last")
    for i, (a, b) in enumerate(itertools.pairwise(ladder.tiers), start=1):
        if b.rank <= a.rank:
            errors.append(f"{label}: tiers[{i}].rank: ranks must be strictly increasing")
    for i, tier in enumerate(ladder.tiers):
        if tier.window.amount <= 0:
            errors.append(f"{label}: tiers[{i}].window.amount: must be positive")
    errors.extend(_check_calendars(ladder, calendars))
    if ladder.deadlines and not errors:
        for reg in ladder.deadlines:
            if not reg.started_by:  # an action's clock starts mid-case: no tier chain
                errors.extend(fit(ladder, reg, calendars))
    return errors


def _check_calendars(ladder: Ladder, calendars: CalendarRegistry) -> list[str]:
    """Every calendar the version counts in is known: its windows' (the migration grace's
    included), and the ``[institution]`` zone exists and its calendar is a base calendar of
    ``calendars`` (not ``institution`` itself). Checked here, not first when an escalation is
    enqueued or a deadline counted on the version (each would fail then, or stop this check
    with a message naming no file)."""
    label, errors = ladder.label, []
    for i, tier in enumerate(ladder.tiers):
        if tier.window.calendar not in calendars:
            errors.append(
                f"{label}: tiers[{i}].window.calendar: unknown calendar {tier.window.calendar!r}"
            )
    for reg in ladder.deadlines:  # one or several deadlines
        if reg.window.calendar not in calendars:
            errors.append(
                f"{label}: regulatory.{reg.name}.calendar: unknown calendar "
                f"{reg.window.calendar!r}"
            )
    grace = ladder.migration.grace
    if grace.calendar not in calendars:
        errors.append(f"{label}: migration.grace.calendar: unknown calendar {grace.calendar!r}")
    if ladder.institution_timezone is not None:
        try:
            zone(ladder.institution_timezone)
        except InvalidInput as exc:
            errors.append(f"{label}: institution.timezone: {exc}")
    cal = ladder.institution_calendar
    if cal is not None and (cal == INSTITUTION or cal not in calendars):
        known = ", ".join(sorted(c for c in calendars if c != INSTITUTION))
        errors.append(f"{label}: institution.calendar: unknown calendar {cal!r} "
                      f"(a base calendar: {known})")
    return errors


def _check_map(previous: Ladder, ladder: Ladder) -> list[str]:
    label, errors = ladder.label, []
    new_ids = set(ladder.tier_ids)
    for old_id in previous.tier_ids:
        if old_id not in new_ids and old_id not in ladder.tier_map:
            errors.append(
                f"{label}: tier_map: tier {old_id!r} of v{previous.version} is removed or renamed"
                f" and must be mapped"
            )
    for old_id, new_id in sorted(ladder.tier_map.items()):
        if old_id not in previous.tier_ids:
            errors.append(
                f"{label}: tier_map.{old_id}: not a tier of v{previous.version}"
                f" ({', '.join(previous.tier_ids)})"
            )
            continue
        if new_id not in new_ids:
            errors.append(f"{label}: tier_map.{old_id}: {new_id!r} is not a tier of this version")
            continue
        old_rank, new_rank = previous.tier(old_id).rank, ladder.tier(new_id).rank
        if new_rank < old_rank:
            errors.append(
                f"{label}: tier_map.{old_id}: maps to {new_id!r} (rank {new_rank}) below "
                f"{old_id!r} (rank {old_rank}); a migration never lowers authority"
            )
    return errors


def _check_checksums(
    by_name: Mapping[str, Mapping[int, Ladder]], applied: Mapping[tuple[str, int], str]
) -> list[str]:
    errors = []
    for (name, version), recorded in sorted(applied.items()):
        ladder = by_name.get(name, {}).get(version)
        if ladder is None:
            errors.append(f"{name}@{version}: (file): released version has no ladder file "
                          "(restore it: escalations may be pinned to it)")
        elif ladder.checksum != recorded:
            errors.append(
                f"{ladder.label}: checksum: file is {ladder.checksum[:12]}..., released as "
                f"{recorded[:12]}...; a released ladder file is never edited, add a new version"
            )
    return errors


def attribute_variants(reg: RegulatoryDeadline) -> list[dict[str, object]]:
    """Every attribute variant of ``reg`` worth checking: one dict of attributes per distinct
    outcome (which variant applies) times every billing-cycle closing day 1-31; ``[{}]`` for
    a deadline that needs no attribute."""
    from escalation.domain.ladder import BILLING_CYCLE_ATTRIBUTE

    flags = [a for a in reg.needs if a != BILLING_CYCLE_ATTRIBUTE]
    seen: dict[int, dict[str, object]] = {}
    for values in itertools.product((False, True), repeat=len(flags)):
        attrs: dict[str, object] = dict(zip(flags, values, strict=True))
        chosen = next((i for i, v in enumerate(reg.variants)
                       if any(attrs[a] for a in v.when_any)), -1)
        seen.setdefault(chosen, attrs)
    days = range(1, 32) if reg.billing_cycles else (None,)
    out = []
    for attrs in seen.values():
        for day in days:
            out.append({**attrs, **({BILLING_CYCLE_ATTRIBUTE: day} if day else {})})
    return out


def check_regulatory_fit(
    ladder: Ladder, reg: RegulatoryDeadline, calendars: CalendarRegistry
) -> list[str]:
    """The tier windows chained from the anchor up to the last tier ``reg`` caps end no later
    than ``reg``'s deadline minus its buffer (worst case over the sampled anchors and every
    attribute variant).

    A pure function of ``ladder``, ``reg`` and ``calendars``, and the slow rule of ``ladder
    check``: anchors every ``ANCHOR_STEP`` across ``ANCHOR_SPAN`` times every attribute
    variant (about 0.2-1.3 s per deadline; 8 s for the shipped ladders).

    Args:
        ladder: one version that passes the other rules (its calendars are known).
        reg: one of ``ladder.deadlines`` (a clock started by a tier, not by an action).
        calendars: calendars by id (``ladder``'s institution calendar and zone are scoped
            onto them).

    Returns:
        One line naming the worst anchor when the windows run past the deadline minus its
        buffer (or when a window, deadline or buffer cannot be computed); empty when it
        fits. Never raises for a bad ladder.
    """
    from escalation.domain.deadline_rules import zone_of

    calendars = scoped_calendars(calendars, ladder.institution_calendar,
                                 ladder.institution_timezone)
    capped = [i for i, t in enumerate(ladder.tiers) if reg.applies_to(t.id)]
    chain = ladder.tiers[: max(capped) + 1] if capped else ()
    worst: tuple[timedelta, datetime, datetime, datetime, dict[str, object]] | None = None
    try:
        buffer_cal = calendars[reg.window.calendar]
        variants = attribute_variants(reg)
        # Day-unit deadlines depend only on the anchor's local date: computed once per date.
        by_date = {v.window.unit for v in reg.variants} | {reg.window.unit} <= {
            WindowUnit.CALENDAR_DAYS, WindowUnit.BUSINESS_DAYS}
        tz = zone_of(reg.window, calendars)
        # Anchors only move forward, so the cache holds the current date's deadlines only
        # (a cache of every date held ~18 MiB at peak for a billing-cycle deadline).
        cache: dict[int, datetime] = {}
        cached_day: object = None
        anchor = ANCHOR_FROM
        while anchor < ANCHOR_FROM + ANCHOR_SPAN:
            end = anchor
            for tier in chain:
                end = window_end(end, tier.window, calendars)
            with_buffer = buffer_cal.add(end, reg.buffer, reg.window.unit) if reg.buffer else end
            day = anchor.astimezone(tz).date() if by_date else anchor
            if day != cached_day:
                cache.clear()
                cached_day = day
            for i, attrs in enumerate(variants):
                deadline = cache.get(i) if by_date else None
                if deadline is None:
                    deadline = reg.deadline(anchor, calendars, attrs)
                    if by_date:
                        cache[i] = deadline
                over = with_buffer - deadline
                if over > timedelta(0) and (worst is None or over > worst[0]):
                    worst = (over, anchor, end, deadline, attrs)
            anchor += ANCHOR_STEP
    except (InvalidInput, KeyError) as exc:
        return [f"{ladder.label}: regulatory: {exc}"]
    except OverflowError:
        # each window and buffer is at most about 100 years, but enough of them chained
        # still runs past what a datetime holds
        return [f"{ladder.label}: regulatory: the tier windows and buffer chained from the "
                f"{reg.name} anchor run past the year 9999"]
    if worst is None:
        return []
    _, at, end, deadline, attrs = worst
    variant = f" with {attrs}" if attrs else ""
    return [
        f"{ladder.label}: regulatory: tier windows do not fit inside {reg.name} "
        f"({reg.window.describe()}, buffer {reg.buffer}){variant}: for an anchor at "
        f"{at.isoformat()} they end at {end.isoformat()}, deadline {deadline.isoformat()}"
    ]
