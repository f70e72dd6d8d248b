"""The projection a dispute's ledger determines, and how a projection row differs from it
(pure).

``escalation_state`` (the projection) is a cache of the ledger: every write appends a ledger
row and changes the projection in the same transaction, so the projection must equal what
the chain of ledger rows says, column by column. This module folds one dispute's rows, in
seq order, into the columns the ledger determines and compares them with the stored row:

* ``status``: ENQUEUED, PROMOTED, RESUMED -> pending; TERMINAL -> terminal; CANCELLED, and a
  PURGED row of a dead-lettered *decision* (its ``details.member`` starts with
  ``decision:``) -> cancelled; PAUSED -> paused; RESOLVED -> resolved; every other event
  leaves it;
* ``tier``: the last row's ``to_tier`` (a TERMINAL row names none: the tier stays);
* ``due_at``: when pending, the last row's ``next_due_at`` (every writer records the due
  time after the event there); otherwise none. A pending chain whose last row carries no
  ``next_due_at`` does not determine it, and it is not compared;
* ``deadlines`` (the clocks that still cap tiers): the ENQUEUED row's
  ``details.deadlines``; an ACTION_RECORDED row's ``details.binding`` names with their
  instants in ``details.clocks``; none after RESOLVED;
* ``obligations`` (every clock's instant after the last action or resolution): NULL until
  an ACTION_RECORDED or RESOLVED row, then the instants of that row's ``details.clocks``;
* ``source`` (the source system's name): the ENQUEUED row's ``details.source`` (none when
  absent); undetermined when the chain's ENQUEUED row is not read;
* ``ladder``, ``ladder_version``, ``materiality``, ``trace_id``, ``source_hash``,
  ``external_id``, ``regulatory_deadline``: the last row's columns of the same names (a row
  records the state *after* its event).

An action row without ``details.clocks`` (written before the obligations existed) leaves
``deadlines`` and ``obligations`` undetermined: they are not compared. Clock lists compare
as name -> instant maps (JSONB keeps no key order); an empty list and NULL are both "no
clocks" for ``deadlines``.

Source of the rules: the writers in ``adapters/audit_store.py``, ``adapters/ladder_history.py``
and ``service_layer/obligations.py`` (docs/reliability.md, "Projection against the ledger").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any
from uuid import UUID

DEAD_DECISION_PREFIX = "decision:"
"""``details.member`` prefix of a dead-lettered decision, whose purge cancels the dispute."""

_STATUS_AFTER: dict[str, str] = {
    "ENQUEUED": "pending",
    "PROMOTED": "pending",
    "RESUMED": "pending",
    "TERMINAL": "terminal",
    "CANCELLED": "cancelled",
    "PAUSED": "paused",
    "RESOLVED": "resolved",
}


class ProjectionColumn(StrEnum):
    """A column of ``escalation_state`` the ledger determines (the value is its name)."""

    STATUS = "status"
    TIER = "tier"
    DUE_AT = "due_at"
    DEADLINES = "deadlines"
    OBLIGATIONS = "obligations"
    MATERIALITY = "materiality"
    LADDER = "ladder"
    LADDER_VERSION = "ladder_version"
    REGULATORY_DEADLINE = "regulatory_deadline"
    TRACE_ID = "trace_id"
    SOURCE_HASH = "source_hash"
    EXTERNAL_ID = "external_id"
    SOURCE = "source"


Clocks = Mapping[str, datetime]
"""Named instants (aware UTC), e.g. a projection's ``deadlines``."""


@dataclass(frozen=True, slots=True)
class LedgerStep:
    """What one ledger row says of the projection after it.

    Attributes:
        seq: the row's position in the chain (from 1).
        event: ``escalation_audit.event``.
        to_tier, next_due_at, regulatory_deadline, ladder, ladder_version, materiality,
        trace_id, source_hash, external_id: the row's columns (instants aware; money a
            Decimal, never a float).
        details: the keys of ``details`` the fold reads (``deadlines``, ``clocks``,
            ``binding``, ``member``, ``source``); others may be absent.
    """

    seq: int
    event: str
    to_tier: str | None
    next_due_at: datetime | None
    regulatory_deadline: datetime | None
    ladder: str
    ladder_version: int
    materiality: Decimal
    trace_id: str
    source_hash: str
    external_id: str | None
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProjectionRow:
    """One ``escalation_state`` row as stored (instants aware; ``deadlines`` /
    ``obligations`` None when the column is NULL)."""

    dispute_id: UUID
    status: str
    tier: str
    due_at: datetime | None
    materiality: Decimal
    ladder: str
    ladder_version: int
    regulatory_deadline: datetime | None
    trace_id: str
    source_hash: str
    external_id: str | None
    deadlines: Clocks | None
    obligations: Clocks | None
    source: str | None = None


@dataclass(frozen=True, slots=True)
class ColumnDifference:
    """One column of one projection row that differs from its ledger.

    ``projection`` / ``ledger``: the stored value and the value the ledger determines
    (``None`` for SQL NULL; instants aware UTC; clocks as name -> instant maps).
    """

    column: ProjectionColumn
    projection: object
    ledger: object

    def render(self) -> str:
        """``tier (projection 'compliance', ledger 'senior')``: the column named first."""
        return (f"{self.column.value} (projection {render_value(self.projection)}, "
                f"ledger {render_value(self.ledger)})")


def render_value(value: object) -> str:
    """A column value in words: ``none`` for NULL, ISO 8601 UTC for an instant, ``{}`` or
    ``{name: instant, ...}`` (by name) for clocks, ``'text'`` for text, digits for numbers."""
    if value is None:
        return "none"
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, Mapping):
        inner = ", ".join(f"{n}: {render_value(at)}" for n, at in sorted(value.items()))
        return "{" + inner + "}"
    if isinstance(value, str):
        return repr(value)
    return str(value)


class LedgerProjection:
    """The projection columns one dispute's ledger determines, folded row by row
    (:meth:`add` in seq order; :attr:`values` holds only the determined columns)."""

    __slots__ = ("_deadlines", "_last", "_obligations", "_source", "_status", "_tier")

    def __init__(self) -> None:
        self._status: str | None = None
        self._tier: str | None = None
        self._deadlines: dict[str, datetime] | None = None  # None: undetermined
        self._obligations: dict[str, datetime] | _Undetermined | None = None
        self._last: LedgerStep | None = None
        self._source: str | _Undetermined | None = UNDETERMINED

    def add(self, step: LedgerStep) -> None:
        """Fold one ledger row (the next seq) into the projection."""
        details = step.details
        self._status = _STATUS_AFTER.get(step.event, self._status)
        if step.event == "PURGED" and str(details.get("member", "")).startswith(
                DEAD_DECISION_PREFIX):
            self._status = "cancelled"
        if step.to_tier is not None:
            self._tier = step.to_tier
        if step.event == "ENQUEUED":
            source = details.get("source")
            self._source = source if isinstance(source, str) else None
            self._deadlines = _instants(details.get("deadlines")) or {}
            self._obligations = None
        elif step.event in ("ACTION_RECORDED", "RESOLVED"):
            clocks = details.get("clocks")
            if not isinstance(clocks, Mapping):
                self._deadlines = None if step.event == "ACTION_RECORDED" else {}
                self._obligations = UNDETERMINED
            else:
                placed = {n: _instant(c.get("at")) if isinstance(c, Mapping) else None
                          for n, c in clocks.items()}
                self._obligations = {n: at for n, at in placed.items() if at is not None}
                binding = details.get("binding") if step.event == "ACTION_RECORDED" else []
                self._deadlines = None if not isinstance(binding, list) else {
                    str(n): at for n in binding if (at := placed.get(str(n))) is not None}
        self._last = step

    @property
    def values(self) -> dict[ProjectionColumn, object]:
        """The determined columns and their values (empty before the first row)."""
        last = self._last
        if last is None:
            return {}
        c = ProjectionColumn
        out: dict[ProjectionColumn, object] = {
            c.MATERIALITY: last.materiality, c.LADDER: last.ladder,
            c.LADDER_VERSION: last.ladder_version,
            c.REGULATORY_DEADLINE: last.regulatory_deadline, c.TRACE_ID: last.trace_id,
            c.SOURCE_HASH: last.source_hash, c.EXTERNAL_ID: last.external_id,
        }
        if self._status is not None:
            out[c.STATUS] = self._status
            if self._status != "pending":
                out[c.DUE_AT] = None
            elif last.next_due_at is not None:
                out[c.DUE_AT] = last.next_due_at
        if self._tier is not None:
            out[c.TIER] = self._tier
        if self._deadlines is not None:
            out[c.DEADLINES] = self._deadlines
        if not isinstance(self._obligations, _Undetermined):
            out[c.OBLIGATIONS] = self._obligations or None  # none placed: written as NULL
        if not isinstance(self._source, _Undetermined):
            out[c.SOURCE] = self._source
        return out


class _Undetermined:
    """The ledger does not say (a row older than the column)."""

    __slots__ = ()


UNDETERMINED = _Undetermined()


def _instant(value: object) -> datetime | None:
    if value is None:
        return None
    at = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return at if at.tzinfo is not None else None  # an unnamed zone is never guessed


def _instants(value: object) -> dict[str, datetime]:
    if not isinstance(value, Mapping):
        return {}
    return {str(n): at for n, v in value.items() if (at := _instant(v)) is not None}


def stored_value(row: ProjectionRow, column: ProjectionColumn) -> object:
    """The stored value of ``column`` in ``row``."""
    value: object = getattr(row, column.value)
    return value


def _same(column: ProjectionColumn, stored: object, expected: object) -> bool:
    if column is ProjectionColumn.DEADLINES:  # NULL and [] both hold no clock
        return (stored or {}) == (expected or {})
    return stored == expected  # aware instants compare as instants, Decimals as numbers


def compare_projection(
    row: ProjectionRow, steps: Iterable[LedgerStep],
) -> tuple[ColumnDifference, ...]:
    """Every column of ``row`` that differs from what its ledger ``steps`` (one dispute, in
    seq order) determine, in :class:`ProjectionColumn` order; empty when they agree or when
    there are no steps (a chain removed by retention says nothing).

    Raises:
        ValueError: an instant in ``details`` that is not ISO 8601.
    """
    fold = LedgerProjection()
    for step in steps:
        fold.add(step)
    expected = fold.values
    found: list[ColumnDifference] = []
    for col in _COLUMNS:  # every row of a full verify comes here: one attribute read each
        if col in expected:
            value = expected[col]
            stored = getattr(row, _ATTRIBUTES[col])
            if not _same(col, stored, value):
                found.append(ColumnDifference(col, stored, value))
    return tuple(found)


_COLUMNS = tuple(ProjectionColumn)
_ATTRIBUTES = {col: col.value for col in _COLUMNS}
