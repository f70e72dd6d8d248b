"""The Escalation value object: one dispute's position on its pinned ladder.

Validation happens here, once, so adapters can trust what they store: aware UTC times, a
UUID dispute id, a tier that exists in the pinned ladder version, a bounded source hash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from uuid import UUID

from escalation.domain.calendars import CalendarRegistry, scoped_calendars
from escalation.domain.errors import InvalidInput
from escalation.domain.ladder import Ladder
from escalation.domain.materiality import Materiality
from escalation.domain.timeutil import require_aware

MAX_SOURCE_HASH_LEN = 128  # SHA-512 hex; SHA-256 hex is 64
MAX_EXTERNAL_ID_LEN = 200
MAX_SOURCE_LEN = 64
"""The longest source system name (``disputes.check_source``: 1-64 characters)."""
_HEX = re.compile(r"^[0-9a-fA-F]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def check_text(value: str, name: str, field: str | None = None) -> str:
    """``value`` unchanged when it holds no control character (C0, DEL, C1: NUL, newline, tab...)
    and no lone surrogate (not Unicode text: it has no UTF-8 bytes, so it cannot be stored).

    Identifiers (external ids, trace ids, tier ids) are single-line printable text; PostgreSQL
    ``text`` cannot store NUL at all, and a trailing newline would make ``"standard\n"`` a
    different tier that looks like ``standard``.

    Raises:
        InvalidInput: a control character or a lone surrogate; the message names ``name``
            and its position; the error's ``field`` is ``field`` (default ``name``).
    """
    m = _CONTROL.search(value)
    if m is not None:
        if "\ud800" <= m.group() <= "\udfff":
            raise InvalidInput(f"{name}: not valid Unicode text (a lone surrogate, or a byte "
                               f"that is not UTF-8) at position {m.start()} in {value[:40]!r}",
                               field=field or name)
        raise InvalidInput(
            f"{name}: control character {m.group()!r} at position {m.start()} in {value[:40]!r}",
            field=field or name)
    return value


MAX_REASON_CHARS = 500
"""Longest ``reason`` recorded for a cancel or pause (the API enforces the same bound)."""


def check_reason(value: str, name: str = "reason") -> str:
    """``value`` unchanged when it is a usable ledger reason: single-line text
    (:func:`check_text`), not blank, at most :data:`MAX_REASON_CHARS` characters.

    Raises:
        InvalidInput: blank (a cancel or pause recorded without a why is no evidence), too
            long, or a control character; the message names ``name``.
    """
    check_text(value, name)
    if not value.strip():
        raise InvalidInput(f"{name} must not be empty: the ledger records it as the why",
                           field=name)
    if len(value) > MAX_REASON_CHARS:
        raise InvalidInput(f"{name}: at most {MAX_REASON_CHARS} characters, got {len(value)}",
                           field=name)
    return value


class Status(StrEnum):
    """Lifecycle of an escalation in the projection."""

    PENDING = "pending"
    PAUSED = "paused"
    TERMINAL = "terminal"
    CANCELLED = "cancelled"
    RESOLVED = "resolved"
    """Closed by a resolution with an outcome code (from any tier, terminal included)."""


ENDED: frozenset[Status] = frozenset({Status.TERMINAL, Status.CANCELLED, Status.RESOLVED})
"""Statuses with nothing left to escalate: the dispute is not in Redis."""


_STATUS_BY_VALUE: dict[str, Status] = {s.value: s for s in Status}


def status_of(value: str) -> Status:
    """``Status(value)`` through a plain dict (the firing path reads one per recorded
    decision; ``EnumType.__call__`` is the slow generic path). Raises ``ValueError`` for an
    unknown value, like ``Status(value)``."""
    found = _STATUS_BY_VALUE.get(value)
    return found if found is not None else Status(value)


def parse_dispute_id(value: object) -> UUID:
    """A dispute id as ``UUID``.

    Raises:
        InvalidInput: ``value`` is not a UUID or a string holding one.
    """
    if isinstance(value, UUID):
        return value
    if isinstance(value, str):
        try:
            return UUID(value.strip())
        except ValueError:
            pass
    raise InvalidInput(f"dispute id must be a UUID, got {value!r}", field="dispute_id")


EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def check_instant(value: object, name: str) -> datetime:
    """An aware instant between 1970-01-01 and 9000-01-01 UTC, returned in UTC.

    Scores in Redis are epoch milliseconds (no negative epochs) and deadline arithmetic must
    not overflow ``datetime``; anything outside that span is a typo, not a dispute.

    Raises:
        InvalidInput: not a datetime, naive, or outside the span.
    """
    aware = require_aware(value, name)  # type: ignore[arg-type]
    if not EARLIEST <= aware < LATEST:
        raise InvalidInput(
            f"{name} {aware.isoformat()} is outside 1970-01-01 .. 9000-01-01 (UTC)", field=name)
    return aware


def check_source_hash(value: object) -> str:
    """A source hash: non-empty hex, at most 128 characters (lower-cased).

    Raises:
        InvalidInput: empty, not hex, or longer than 128 characters.
    """
    if not isinstance(value, str) or not value:
        raise InvalidInput("source hash must be a non-empty hex string", field="source_hash")
    if len(value) > MAX_SOURCE_HASH_LEN:
        raise InvalidInput(
            f"source hash is {len(value)} characters; at most {MAX_SOURCE_HASH_LEN} allowed",
            field="source_hash")
    if not _HEX.match(value):
        raise InvalidInput(f"source hash must be hexadecimal, got {value[:20]!r}",
                           field="source_hash")
    return value.lower()


@dataclass(frozen=True, slots=True)
class NewEscalation:
    """What a new escalation is built from (:meth:`Escalation.new`), before it is checked.

    The fields are :class:`Escalation`'s, unvalidated: ``dispute_id`` a UUID or its text,
    ``materiality`` a Decimal, int or decimal text (never a float), ``source_hash`` hex
    text, every instant aware. The ladder version is given to :meth:`Escalation.new` beside
    it (its name and version are pinned; ``tier`` must be one of its tiers).
    """

    dispute_id: object
    tier: str
    due_at: datetime
    materiality: object
    source_hash: object
    entered_tier_at: datetime
    trace_id: str
    external_id: str | None = None
    regulatory_deadline: datetime | None = None
    deadlines: tuple[tuple[str, datetime], ...] = ()
    institution_tz: str | None = None
    institution_calendar: str | None = None
    source: str | None = None


@dataclass(frozen=True, slots=True)
class Escalation:
    """One dispute's escalation state.

    Attributes:
        dispute_id: the dispute (UUID; non-UUID source ids are mapped by ``import``).
        tier: current tier id in the pinned ladder version.
        due_at: aware UTC instant the current tier's SLA window ends (the breach time).
        materiality: disputed amount, Decimal cents.
        source_hash: hex digest of the source record (seed field).
        ladder: ladder name; ``ladder_version``: the pinned version.
        seq: sequence number of the last ledger row for this dispute (1 after enqueue).
        entered_tier_at: aware UTC instant the escalation entered ``tier``.
        trace_id: correlation id carried into every log event and ledger row.
        external_id: the source system's id when it is not a UUID (e.g. CFPB Complaint ID).
        regulatory_deadline: aware UTC regulatory deadline that caps the *current* tier (the
            earliest-capping one when several apply), when the ladder defines one.
        status: lifecycle status.
        deadlines: every regulatory deadline of the escalation, ``((name, aware UTC), ...)``
            in the ladder's order, computed once at enqueue from the anchor;
            empty for ladders without deadlines (or rows written before deadlines were
            recorded on escalations).
        institution_tz: IANA zone of the institution for this escalation (its local days,
            date-only inputs, business hours); None = the deployment default (rows written
            before it was stored).
        institution_calendar: base calendar id the ``institution`` calendar counts in for
            this escalation; None = the deployment default.
        source: the source system's name (e.g. ``crm``): given with ``external_id``, or the
            import mapping's; None when not known (named by UUID over the API or CLI, or
            enqueued before the name was kept).
    """

    dispute_id: UUID
    tier: str
    due_at: datetime
    materiality: Materiality
    source_hash: str
    ladder: str
    ladder_version: int
    seq: int
    entered_tier_at: datetime
    trace_id: str
    external_id: str | None = None
    regulatory_deadline: datetime | None = None
    status: Status = Status.PENDING
    deadlines: tuple[tuple[str, datetime], ...] = ()
    institution_tz: str | None = None
    institution_calendar: str | None = None
    source: str | None = None

    @classmethod
    def new(cls, spec: NewEscalation, ladder: Ladder) -> Escalation:
        """Validate ``spec`` and build a fresh escalation on ``ladder`` (``seq`` 0: not yet
        recorded).

        Raises:
            InvalidInput: naive datetime, non-UUID id, float/NaN/negative materiality,
                bad source hash, over-long external id or source, a control character (NUL,
                newline, ...) in the tier, external id, source or trace id.
            UnknownTier: ``tier`` is not in ``ladder``.
        """
        tier, trace_id = spec.tier, spec.trace_id
        external_id, source = spec.external_id, spec.source
        regulatory_deadline = spec.regulatory_deadline
        ladder.tier(check_text(tier, "tier"))
        if external_id is not None:
            check_text(external_id, "external id", "external_id")
        check_text(trace_id, "trace id", "trace_id")
        if external_id is not None and len(external_id) > MAX_EXTERNAL_ID_LEN:
            raise InvalidInput(f"external id longer than {MAX_EXTERNAL_ID_LEN} characters",
                               field="external_id")
        if source is not None:
            check_text(source, "source", "source")
            if not source or len(source) > MAX_SOURCE_LEN:
                raise InvalidInput(f"source must be 1-{MAX_SOURCE_LEN} characters",
                                   field="source")
        if not trace_id or len(trace_id) > 64:
            raise InvalidInput("trace id must be 1-64 characters", field="trace_id")
        return cls(
            dispute_id=parse_dispute_id(spec.dispute_id),
            tier=tier,
            due_at=check_instant(spec.due_at, "due_at"),
            materiality=Materiality.parse(spec.materiality),
            source_hash=check_source_hash(spec.source_hash),
            ladder=ladder.name,
            ladder_version=ladder.version,
            seq=0,
            entered_tier_at=check_instant(spec.entered_tier_at, "entered_tier_at"),
            trace_id=trace_id,
            external_id=external_id,
            regulatory_deadline=(
                None
                if regulatory_deadline is None
                else check_instant(regulatory_deadline, "regulatory_deadline")
            ),
            deadlines=tuple((n, check_instant(at, f"deadline {n}"))
                            for n, at in spec.deadlines),
            institution_tz=spec.institution_tz,
            institution_calendar=spec.institution_calendar,
            source=source,
        )

    @property
    def ladder_key(self) -> str:
        """``"<ladder>@<version>"``."""
        return f"{self.ladder}@{self.ladder_version}"

    def calendars(self, registry: CalendarRegistry) -> CalendarRegistry:
        """``registry`` with its ``institution`` calendar bound to this escalation's zone and
        calendar (``calendars.scoped_calendars``). Raises InvalidInput if unknown."""
        return scoped_calendars(registry, self.institution_calendar, self.institution_tz)

    def with_changes(self, **changes: object) -> Escalation:
        """A copy with fields replaced (dataclasses.replace)."""
        return replace(self, **changes)  # type: ignore[arg-type]
