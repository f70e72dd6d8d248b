"""The one mapping between an ``Escalation`` and its Redis payload HASH (both directions).

The payload is kept compact because every pending escalation holds one (memory matters).
Field names are one letter where the name is read only here: in a small HASH (listpack
encoding) every field name is stored in every payload, so the long names of earlier
versions were about a quarter of a payload's bytes (612 -> 549 B per pending escalation
with one-letter names). ``seq`` and ``due_ms`` keep their names because Lua scripts
(``apply.lua``, ``cancel.lua``, ``reconcile_remove.lua``) and the reliability sweep read them
by name.

====== ============ ================================================ =======================
field  earlier name value                                            example
====== ============ ================================================ =======================
t      tier         current tier id                                  ``senior``
l      ladder       ``"<ladder name>@<pinned version>"``             ``default@1``
seq    seq          sequence number of the last ledger row (integer) ``3``
due_ms due_ms       breach time, epoch **milliseconds** UTC          ``1767225600000``
e      entered_ms   time the tier was entered, epoch ms UTC          ``1767139200000``
m      materiality  Decimal string, two fractional digits            ``1250.00``
h      source_hash  lower-case hex digest of the source record       ``a1b2c3``
r      trace_id     correlation id                                   ``7f0c...``
x      external_id  only when set: the source system's non-UUID id   ``CFPB-123``
s      (none)       only when set: the source system's name          ``cfpb``
d      deadline_ms  only when set: regulatory deadline, epoch ms UTC ``1767744000000``
ds     deadlines    only when set: every deadline, ``name=ms``       ``a=1767744000000,...``
                    joined by ``,`` (ladders with several deadlines)
z      tz           only when set: the institution's IANA time zone  ``America/New_York``
c      cal          only when set: the institution's calendar        ``us_federal``
====== ============ ================================================ =======================

Backward compatible reading: :func:`payload_to_escalation` also accepts a payload written by
an earlier version (the long names, ``LEGACY_NAMES``), so escalations pending in Redis across
an upgrade still decode, claim and fire; their next write (``apply.lua`` DELs and re-HSETs the
whole payload; enqueue and restore write through :func:`escalation_to_payload`) stores the
short names. Every write stores a whole payload (``enqueue.lua`` writes only where no payload
exists, ``apply.lua`` DELs first), so a payload is in one format or the other: one holding the
short ``t`` field is read by the short names only, any other by the long names.

The dispute id is not stored in the hash: it is the key suffix and the ZSET member.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from uuid import UUID

from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation, Status, parse_dispute_id
from escalation.domain.materiality import Materiality
from escalation.domain.timeutil import EPOCH, from_ms, to_ms

REQUIRED_FIELDS: tuple[str, ...] = ("t", "l", "seq", "due_ms", "e", "m", "h", "r")
OPTIONAL_FIELDS: tuple[str, ...] = ("x", "s", "d", "ds", "z", "c")
PAYLOAD_FIELDS: tuple[str, ...] = REQUIRED_FIELDS + OPTIONAL_FIELDS

#: Short (current) field name -> the long name an earlier version wrote. Read-only: nothing
#: writes the long names any more.
LEGACY_NAMES: Mapping[str, str] = {
    "t": "tier",
    "l": "ladder",
    "seq": "seq",
    "due_ms": "due_ms",
    "e": "entered_ms",
    "m": "materiality",
    "h": "source_hash",
    "r": "trace_id",
    "x": "external_id",
    "s": "source",  # no earlier version wrote it: the long name is only read
    "d": "deadline_ms",
    "ds": "deadlines",
    "z": "tz",
    "c": "cal",
}


def escalation_to_payload(esc: Escalation) -> dict[str, str]:
    """The payload HASH fields of ``esc`` (all values strings; times in epoch ms UTC).

    Optional fields (``x``, ``s``, ``d``, ``ds``, ``z``, ``c``) appear only when set.
    ``status`` is not stored: a payload with a ZSET member is pending, one without (after
    ``apply`` PARK) is paused.
    """
    fields = {
        "t": esc.tier,
        "l": esc.ladder_key,
        "seq": str(int(esc.seq)),
        "due_ms": str(to_ms(esc.due_at)),
        "e": str(to_ms(esc.entered_tier_at)),
        "m": str(esc.materiality),
        "h": esc.source_hash,
        "r": esc.trace_id,
    }
    if esc.external_id is not None:
        fields["x"] = esc.external_id
    if esc.source is not None:
        fields["s"] = esc.source
    if esc.regulatory_deadline is not None:
        fields["d"] = str(to_ms(esc.regulatory_deadline))
    if esc.deadlines:
        fields["ds"] = ",".join(f"{n}={to_ms(at)}" for n, at in esc.deadlines)
    if esc.institution_tz is not None:
        fields["z"] = esc.institution_tz
    if esc.institution_calendar is not None:
        fields["c"] = esc.institution_calendar
    return fields


def payload_pairs(esc: Escalation) -> list[str]:
    """:func:`escalation_to_payload` as the flat list ``[f1, v1, f2, v2, ...]``, same fields
    in the same order (apply.lua's argument form, built without the intermediate dict)."""
    flat = ["t", esc.tier, "l", f"{esc.ladder}@{esc.ladder_version}", "seq", str(int(esc.seq)),
            "due_ms", str(to_ms(esc.due_at)), "e", str(to_ms(esc.entered_tier_at)),
            "m", str(esc.materiality), "h", esc.source_hash, "r", esc.trace_id]
    if esc.external_id is not None:
        flat += ("x", esc.external_id)
    if esc.source is not None:
        flat += ("s", esc.source)
    if esc.regulatory_deadline is not None:
        flat += ("d", str(to_ms(esc.regulatory_deadline)))
    if esc.deadlines:
        flat += ("ds", ",".join(f"{n}={to_ms(at)}" for n, at in esc.deadlines))
    if esc.institution_tz is not None:
        flat += ("z", esc.institution_tz)
    if esc.institution_calendar is not None:
        flat += ("c", esc.institution_calendar)
    return flat


def normalize_payload(fields: Mapping[str, str]) -> Mapping[str, str]:
    """``fields`` keyed by the current (short) names, whichever format wrote them.

    A payload holding ``t`` is in the current format and is returned as it is (no copy: the
    claim path decodes every claimed payload); any other is taken for the earlier format and
    its known long names (``LEGACY_NAMES``) are mapped to the short ones, unknown fields
    dropped. Never raises; missing fields stay missing.
    """
    if "t" in fields:
        return fields
    return {
        short: fields[long]
        for short, long in LEGACY_NAMES.items()
        if long in fields
    }


def _int_field(fields: Mapping[str, str], name: str) -> int:
    try:
        return int(fields[name])
    except (KeyError, ValueError):
        raise InvalidInput(
            f"payload field {name!r} ({LEGACY_NAMES[name]}) missing or not an integer"
        ) from None


def payload_to_escalation(
    dispute_id: UUID | str, fields: Mapping[str, str], status: Status = Status.PENDING
) -> Escalation:
    """Rebuild an ``Escalation`` from its payload HASH (inverse of ``escalation_to_payload``).

    Reads the current short field names and, for payloads written by an earlier version, the
    long names (see the module docstring).

    Args:
        dispute_id: the member / key suffix (UUID or its string).
        fields: the HGETALL result (str -> str).
        status: lifecycle status to attach (the payload does not store it).

    Raises:
        InvalidInput: a required field is missing or malformed.
    """
    f = normalize_payload(fields)
    missing = [LEGACY_NAMES[name] for name in REQUIRED_FIELDS if name not in f]
    if missing:
        raise InvalidInput(f"payload of {dispute_id} lacks fields {missing}")
    name, sep, version = f["l"].rpartition("@")
    if not sep or not name or not version.isdigit():
        raise InvalidInput(f"payload ladder {f['l']!r} is not '<name>@<version>'")
    return Escalation(
        dispute_id=parse_dispute_id(dispute_id),
        tier=f["t"],
        due_at=from_ms(_int_field(f, "due_ms")),
        materiality=Materiality.parse(f["m"]),
        source_hash=f["h"],
        ladder=name,
        ladder_version=int(version),
        seq=_int_field(f, "seq"),
        entered_tier_at=from_ms(_int_field(f, "e")),
        trace_id=f["r"],
        external_id=f.get("x"),
        regulatory_deadline=None if "d" not in f else from_ms(_int_field(f, "d")),
        status=status,
        deadlines=_deadlines(f.get("ds")),
        institution_tz=f.get("z"),
        institution_calendar=f.get("c"),
        source=f.get("s"),
    )


def _deadlines(text: str | None) -> tuple[tuple[str, datetime], ...]:
    """Parse the ``ds`` field (``name=ms,name=ms``). Raises InvalidInput if malformed."""
    if not text:
        return ()
    out: list[tuple[str, datetime]] = []
    for part in text.split(","):
        name, sep, ms = part.partition("=")
        if not sep or not name or not ms.isdigit():
            raise InvalidInput(f"payload deadlines {text!r} is not 'name=ms,...'")
        out.append((name, from_ms(int(ms))))
    return tuple(out)


_CURRENT_NAMES = frozenset(PAYLOAD_FIELDS)
_MS = timedelta(milliseconds=1)


def claimed_payload_to_escalation(member: str, flat: Sequence[str]) -> Escalation:
    """:func:`payload_to_escalation` for a payload claim.lua just returned, as its flat
    ``HGETALL`` reply ``[f1, v1, ...]``: the same ``Escalation`` (status pending), cheaper.

    The payload was written by this code (``escalation_to_payload`` through enqueue.lua /
    apply.lua), so a payload in the current format whose values have exactly the forms that
    function writes (digits for the times and ``seq``, a two-decimal amount, ``name@digits``
    ladder, no unknown field) is taken as it is, without the text checks of
    ``Materiality.parse``. Anything else -- a payload of an earlier version (long names), a
    field of an unexpected form -- goes through :func:`payload_to_escalation`, which
    validates and raises as before.

    Raises:
        InvalidInput: as :func:`payload_to_escalation` (a missing or malformed field).
    """
    n = len(flat)
    f = dict(zip(flat[0:n - 1:2], flat[1:n:2], strict=True)) if n % 2 == 0 else None
    if f is None or not _CURRENT_NAMES.issuperset(f):
        return payload_to_escalation(member, f if f is not None else _pairs_of(flat))
    try:
        tier, ladder_key, seq, due, entered, amount, source_hash, trace_id = (
            f["t"], f["l"], f["seq"], f["due_ms"], f["e"], f["m"], f["h"], f["r"])
    except KeyError:
        return payload_to_escalation(member, f)  # raises: a required field is missing
    name, _, version = ladder_key.rpartition("@")
    if not (name and _digits(version) and _digits(seq) and _digits(due)
            and _digits(entered) and 3 < len(amount) <= 18 and amount[-3] == "."
            and _digits(amount[:-3]) and _digits(amount[-2:])
            and isinstance(member, str) and len(member) == 36
            and (len(f) == 8 or _optional_plain(f))):
        return payload_to_escalation(member, f)
    deadline = f.get("d")
    return Escalation(
        dispute_id=parse_dispute_id(member),
        tier=tier,
        due_at=EPOCH + int(due) * _MS,
        materiality=Materiality(Decimal(amount)),
        source_hash=source_hash,
        ladder=name,
        ladder_version=int(version),
        seq=int(seq),
        entered_tier_at=EPOCH + int(entered) * _MS,
        trace_id=trace_id,
        external_id=f.get("x"),
        regulatory_deadline=None if deadline is None else EPOCH + int(deadline) * _MS,
        status=Status.PENDING,
        deadlines=_deadlines(f.get("ds")),
        institution_tz=f.get("z"),
        institution_calendar=f.get("c"),
        source=f.get("s"),
    )


def _optional_plain(f: Mapping[str, str]) -> bool:
    """True when the optional ``d`` field, if present, is plain digits (``ds`` is checked by
    ``_deadlines``, which raises)."""
    d = f.get("d")
    return d is None or _digits(d)


def _digits(text: str) -> bool:
    """True when ``text`` is non-empty ASCII digits (``str.isdigit`` alone admits other
    scripts' digits and superscripts)."""
    return text.isascii() and text.isdigit()


def _pairs_of(flat: Sequence[str]) -> dict[str, str]:
    """``{f1: v1, ...}`` of a flat reply; a trailing odd element is ignored."""
    even = len(flat) // 2 * 2
    return dict(zip(flat[0:even:2], flat[1:even:2], strict=True))
