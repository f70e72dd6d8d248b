"""The one mapping between an ``Escalation`` and its Redis payload HASH (both directions).

The payload is kept compact because every pending escalation holds one (memory matters):

=============== ==================================================== =================
field           value                                                 example
=============== ==================================================== =================
tier            current tier id                                       ``senior``
ladder          ``"<ladder name>@<pinned version>"``                  ``default@1``
seq             sequence number of the last ledger row (integer)      ``3``
due_ms          breach time, epoch **milliseconds** UTC                ``1767225600000``
entered_ms      time the tier was entered, epoch ms UTC                ``1767139200000``
materiality     Decimal string, two fractional digits                 ``1250.00``
source_hash     lower-case hex digest of the source record            ``a1b2c3``
trace_id        correlation id                                        ``7f0c...``
external_id     only when set: the source system's non-UUID id        ``CFPB-123``
deadline_ms     only when set: regulatory deadline, epoch ms UTC       ``1767744000000``
deadlines       only when set: every deadline, ``name=ms`` joined by   ``a=1767744000000,b=...``
                ``,`` (ladders with several deadlines)
=============== ==================================================== =================

The dispute id is not stored in the hash: it is the key suffix and the ZSET member.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from uuid import UUID

from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation, Status, parse_dispute_id
from escalation.domain.materiality import Materiality
from escalation.domain.timeutil import from_ms, to_ms

REQUIRED_FIELDS: tuple[str, ...] = (
    "tier",
    "ladder",
    "seq",
    "due_ms",
    "entered_ms",
    "materiality",
    "source_hash",
    "trace_id",
)
OPTIONAL_FIELDS: tuple[str, ...] = ("external_id", "deadline_ms", "deadlines", "tz", "cal")
PAYLOAD_FIELDS: tuple[str, ...] = REQUIRED_FIELDS + OPTIONAL_FIELDS
_REQUIRED = frozenset(REQUIRED_FIELDS)


def escalation_to_payload(esc: Escalation) -> dict[str, str]:
    """The payload HASH fields of ``esc`` (all values strings; times in epoch ms UTC).

    ``external_id`` / ``deadline_ms`` appear only when set. ``status`` is not stored: a payload
    with a ZSET member is pending, one without (after ``apply`` PARK) is paused.
    """
    fields = {
        "tier": esc.tier,
        "ladder": esc.ladder_key,
        "seq": str(int(esc.seq)),
        "due_ms": str(to_ms(esc.due_at)),
        "entered_ms": str(to_ms(esc.entered_tier_at)),
        "materiality": str(esc.materiality),
        "source_hash": esc.source_hash,
        "trace_id": esc.trace_id,
    }
    if esc.external_id is not None:
        fields["external_id"] = esc.external_id
    if esc.regulatory_deadline is not None:
        fields["deadline_ms"] = str(to_ms(esc.regulatory_deadline))
    if esc.deadlines:
        fields["deadlines"] = ",".join(f"{n}={to_ms(at)}" for n, at in esc.deadlines)
    if esc.institution_tz is not None:
        fields["tz"] = esc.institution_tz
    if esc.institution_calendar is not None:
        fields["cal"] = esc.institution_calendar
    return fields


def _int_field(fields: Mapping[str, str], name: str) -> int:
    try:
        return int(fields[name])
    except (KeyError, ValueError):
        raise InvalidInput(f"payload field {name!r} missing or not an integer") from None


def payload_to_escalation(
    dispute_id: UUID | str, fields: Mapping[str, str], status: Status = Status.PENDING
) -> Escalation:
    """Rebuild an ``Escalation`` from its payload HASH (inverse of ``escalation_to_payload``).

    Args:
        dispute_id: the member / key suffix (UUID or its string).
        fields: the HGETALL result (str -> str).
        status: lifecycle status to attach (the payload does not store it).

    Raises:
        InvalidInput: a required field is missing or malformed.
    """
    if not _REQUIRED.issubset(fields.keys()):
        missing = [name for name in REQUIRED_FIELDS if name not in fields]
        raise InvalidInput(f"payload of {dispute_id} lacks fields {missing}")
    name, sep, version = fields["ladder"].rpartition("@")
    if not sep or not name or not version.isdigit():
        raise InvalidInput(f"payload ladder {fields['ladder']!r} is not '<name>@<version>'")
    deadline = fields.get("deadline_ms")
    return Escalation(
        dispute_id=parse_dispute_id(dispute_id),
        tier=fields["tier"],
        due_at=from_ms(_int_field(fields, "due_ms")),
        materiality=Materiality.parse(fields["materiality"]),
        source_hash=fields["source_hash"],
        ladder=name,
        ladder_version=int(version),
        seq=_int_field(fields, "seq"),
        entered_tier_at=from_ms(_int_field(fields, "entered_ms")),
        trace_id=fields["trace_id"],
        external_id=fields.get("external_id"),
        regulatory_deadline=None
        if deadline is None
        else from_ms(_int_field(fields, "deadline_ms")),
        status=status,
        deadlines=_deadlines(fields.get("deadlines")),
        institution_tz=fields.get("tz"),
        institution_calendar=fields.get("cal"),
    )


def _deadlines(text: str | None) -> tuple[tuple[str, datetime], ...]:
    """Parse the ``deadlines`` field (``name=ms,name=ms``). Raises InvalidInput if malformed."""
    if not text:
        return ()
    out: list[tuple[str, datetime]] = []
    for part in text.split(","):
        name, sep, ms = part.partition("=")
        if not sep or not name or not ms.isdigit():
            raise InvalidInput(f"payload deadlines {text!r} is not 'name=ms,...'")
        out.append((name, from_ms(int(ms))))
    return tuple(out)
