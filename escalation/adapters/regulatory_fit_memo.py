"""The regulatory-fit sweep of a ladder file, remembered per file checksum in this process.

``ladder check``'s regulatory-fit rule
(:func:`~escalation.domain.ladder_check.check_regulatory_fit`) sweeps five years of anchors
for every deadline: about 0.2-1.3 s per deadline, 8 s for the shipped ladders. It is a pure
function of the ladder file's bytes and the calendars, and one process often checks the same
files again: the first-use baseline release, then ``ladder release`` or ``migrate`` in the
same process, or one process building apps on several new databases (the test suite).
:class:`RegulatoryFitMemo` answers a repeated check from memory; the ladder-file adapter
(``adapters.ladder_files``) hands :data:`PROCESS_FIT_MEMO` to
:func:`~escalation.domain.ladder_check.check_ladders`, whose own check keeps nothing.
"""

from __future__ import annotations

from escalation.domain.calendars import CalendarRegistry
from escalation.domain.ladder import Ladder, RegulatoryDeadline
from escalation.domain.ladder_check import RegulatoryFitCheck, check_regulatory_fit

LIMIT = 512
"""Answers held before the memo starts again from empty (one per deadline of each ladder file
and calendars checked; more only in a process that checks many rewritten files)."""


class RegulatoryFitMemo:
    """A :data:`~escalation.domain.ladder_check.RegulatoryFitCheck` that answers from memory
    when this memo has checked the same file against equal calendars before.

    Keyed by (file label, file checksum, deadline name, calendars): a file rewritten under
    the same name has a new checksum and is checked anew; its old bytes get the old answer
    back. Calendars are compared by value (frozen dataclasses; a holiday rule by identity),
    so a calendars file read again is checked again. A ladder built in code (no file
    checksum) and calendars that cannot be hashed are checked every time.

    Args:
        check: the check it remembers (:func:`check_regulatory_fit`; tests count calls).
        limit: a new answer that finds more than ``limit`` held clears them first.
    """

    def __init__(self, check: RegulatoryFitCheck = check_regulatory_fit, *,
                 limit: int = LIMIT) -> None:
        self._check, self._limit = check, limit
        self._seen: dict[tuple[object, ...], list[str]] = {}

    def __call__(self, ladder: Ladder, reg: RegulatoryDeadline,
                 calendars: CalendarRegistry) -> list[str]:
        """The problems :func:`check_regulatory_fit` reports for ``reg`` of ``ladder``
        against ``calendars`` (a new list each call; never raises for a bad ladder)."""
        if not ladder.checksum:
            return self._check(ladder, reg, calendars)
        try:
            key: tuple[object, ...] = (ladder.label, ladder.checksum, reg.name,
                                       tuple(sorted(calendars.items())))
            hash(key)
        except TypeError:  # a calendar that cannot be compared by value: checked every time
            return self._check(ladder, reg, calendars)
        seen = self._seen.get(key)
        if seen is None:
            if len(self._seen) > self._limit:
                self._seen.clear()
            seen = self._seen[key] = self._check(ladder, reg, calendars)
        return list(seen)

    def __len__(self) -> int:
        """Answers held now."""
        return len(self._seen)


PROCESS_FIT_MEMO = RegulatoryFitMemo()
"""This process's memo: the one every ladder catalog and ``ladder check`` of
``adapters.ladder_files`` uses unless given another."""
