"""Hash chain of the audit ledger (pure): canonical bytes, row hash, chain verification.

Every ledger row carries ``row_hash = SHA-256(prev_hash || canonical_bytes(fields))`` where
``prev_hash`` is the previous row's ``row_hash`` in the same dispute's chain, or 32 zero bytes
(:data:`GENESIS`) for ``seq`` 1. Changing, reordering or removing a row in the middle of a
chain is therefore detectable (docs/audit.md, "Tamper evidence"; ADR 0007).

Canonical serialization (version 1, :data:`HASH_VERSION`), the bytes a verifier can
reproduce from the stored row years later (the normative text, precise enough for a verifier
in another language and saying why it is not RFC 8785 JCS: docs/audit.md, "Canonical bytes
(hash version 1)"):

* a JSON object of exactly the :data:`HASHED_FIELDS` keys (missing keys are ``null``);
* keys sorted, no whitespace (``separators=(",", ":")``), UTF-8, non-ASCII kept as is;
* ``datetime``: must be timezone-aware; rendered in UTC as
  ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (always six fractional digits);
* ``Decimal``: fixed-point string, e.g. ``"1250.00"`` (money arrives quantized to cents,
  exactly as ``numeric(18,2)`` returns it); NaN/infinity refused;
* ``UUID``: lower-case hyphenated string;
* ``None`` -> ``null``; ``bool``/``int``/``str`` as JSON; ``dict``/``list``/``tuple``
  recursively (dict keys must be strings); ``bytes`` as lower-case hex;
* ``float`` is refused (no float may come near money or a hash);
* ``recorded_at``, ``prev_hash`` and ``row_hash`` are NOT hashed: the database assigns
  ``recorded_at`` and the other two are the chain itself.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from functools import lru_cache
from json.encoder import encode_basestring  # the encoder json.dumps(ensure_ascii=False) uses
from typing import Any
from uuid import UUID

import orjson

from escalation.domain.errors import InvalidInput

HASH_VERSION = 1
GENESIS = bytes(32)
"""``prev_hash`` of the first row (seq 1) of every dispute's chain: 32 zero bytes."""

HASHED_FIELDS: tuple[str, ...] = (
    "dispute_id",
    "seq",
    "event",
    "match_decision",
    "from_tier",
    "to_tier",
    "ladder",
    "ladder_version",
    "calendar_version",
    "materiality",
    "due_at",
    "next_due_at",
    "regulatory_deadline",
    "decided_at",
    "actor",
    "trace_id",
    "source_hash",
    "external_id",
    "fence_token",
    "details",
)
"""Ledger columns covered by the hash (everything except recorded_at, prev_hash, row_hash)."""


def _canonical_scalar(value: Any, path: str) -> Any:
    """JSON-ready form of a non-container value (see the module docstring for the rules).

    Raises:
        InvalidInput: naive datetime, float, non-finite Decimal, or an unsupported type.
    """
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        raise InvalidInput(f"{path}: float {value!r} cannot be hashed canonically; use Decimal")
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidInput(f"{path}: non-finite Decimal {value!r}")
        return format(value, "f")
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidInput(f"{path}: naive datetime {value.isoformat()} (must be aware)")
        return _iso_utc(value)
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    raise InvalidInput(f"{path}: cannot hash a value of type {type(value).__name__}")


@lru_cache(maxsize=4096)
def _iso_utc(value: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` of an aware datetime, in UTC.

    Cached: a batch shares its decision instant and many due times. Equal aware datetimes
    are the same instant, so they share one UTC rendering (naive ones never get here).
    """
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _fast_form(value: Any) -> Any:
    """Canonical form of the common exact types, or :data:`_SLOW` to take the full checks."""
    kind = type(value)
    if kind is str or kind is int or value is None or kind is bool:
        return value
    if kind is datetime and value.utcoffset() is not None:
        return _iso_utc(value)
    if kind is Decimal and value.is_finite():
        return format(value, "f")
    if kind is UUID:
        return str(value)
    if kind is dict and not value:  # the common empty ``details``
        return {}
    return _SLOW


_SLOW = object()


def _canonical_value(value: Any, path: str) -> Any:
    """JSON-ready form of ``value``, recursing into dicts (string keys only) and lists.

    Raises:
        InvalidInput: as :func:`_canonical_scalar`, or a non-string dict key.
    """
    fast = _fast_form(value)  # hot path: about 20 fields per ledger row
    if fast is not _SLOW:
        return fast
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInput(f"{path}: dict key {key!r} is not a string")
            out[key] = _canonical_value(item, f"{path}.{key}")
        return out
    if isinstance(value, list | tuple):
        return [_canonical_value(item, f"{path}[{i}]") for i, item in enumerate(value)]
    return _canonical_scalar(value, path)


def canonical_bytes(fields: Mapping[str, Any]) -> bytes:
    """The canonical UTF-8 JSON bytes of a ledger row's hashed fields.

    Each value is first put in its canonical JSON-ready form (:func:`_fast_form` for the
    common exact types, :func:`_canonical_value` for the rest), then the document is
    serialised by orjson with sorted keys, which yields exactly what
    ``json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` gives
    (:func:`reference_canonical_bytes` is that definition; the tests compare both on
    generated rows and on every single character). What orjson refuses (an integer beyond
    64 bits, a lone surrogate) takes the field-by-field encoder :func:`_canonical_text`,
    which gives the reference's bytes or raises as it does.

    Args:
        fields: a mapping holding (a superset of) :data:`HASHED_FIELDS`; other keys such as
            ``recorded_at``, ``prev_hash`` and ``row_hash`` are ignored, missing ones are null.

    Raises:
        InvalidInput: a value that has no canonical form (naive datetime, float, ...).
        UnicodeEncodeError: a string holding a lone surrogate (as the reference does).
    """
    get = fields.get
    doc: dict[str, Any] = {}
    for name in _SORTED_FIELDS:
        value = get(name)
        kind = type(value)
        if kind is str or kind is int or value is None:  # most fields: already canonical
            doc[name] = value
            continue
        form = _fast_form(value)
        doc[name] = _canonical_value(value, name) if form is _SLOW else form
    try:
        return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return _canonical_text(fields).encode("utf-8")


_SORTED_FIELDS: tuple[str, ...] = tuple(sorted(HASHED_FIELDS))


def _canonical_text(fields: Mapping[str, Any]) -> str:
    """:func:`canonical_bytes` as text, built field by field with the standard library's
    encoders (pre-encoded sorted keys; :func:`_json_fast` per value, ``json.dumps`` of the
    canonical form for the rest). Raises InvalidInput as :func:`canonical_bytes`."""
    parts: list[str] = []
    get = fields.get
    for prefix, name in _PLAN:
        value = get(name)
        text = _json_fast(value)
        if text is None:
            text = json.dumps(_canonical_value(value, name), sort_keys=True,
                              separators=(",", ":"), ensure_ascii=False)
        parts.append(prefix)
        parts.append(text)
    parts.append("}")
    return "".join(parts)


def reference_canonical_bytes(fields: Mapping[str, Any]) -> bytes:
    """The definition of :func:`canonical_bytes` (one generic ``json.dumps``); slower, kept
    as the reference the fast path is tested against."""
    doc = {name: _canonical_value(fields.get(name), name) for name in HASHED_FIELDS}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


_PLAN: tuple[tuple[str, str], ...] = tuple(
    (("{" if i == 0 else ",") + encode_basestring(name) + ":", name)
    for i, name in enumerate(sorted(HASHED_FIELDS))
)


def _datetime_json(value: datetime) -> str | None:
    return None if value.utcoffset() is None else '"' + _iso_utc(value) + '"'


def _decimal_json(value: Decimal) -> str | None:
    return '"' + format(value, "f") + '"' if value.is_finite() else None


_FAST_JSON: dict[type, Callable[[Any], str | None]] = {
    str: encode_basestring,
    int: int.__repr__,
    type(None): lambda _value: "null",
    bool: lambda value: "true" if value else "false",
    datetime: _datetime_json,
    Decimal: _decimal_json,
    UUID: lambda value: '"' + str(value) + '"',
    dict: lambda value: None if value else "{}",  # the common empty ``details``
}


def _json_fast(value: Any) -> str | None:
    """JSON text of the canonical form of a value of an exact common type, else None.

    The quoted renderings (datetime, Decimal, UUID) hold only ASCII digits, letters and
    ``-:.TZ``, which JSON never escapes, so quoting them by hand equals ``json.dumps``.
    Naive datetimes and non-finite Decimals return None (the full path raises for them).
    """
    render = _FAST_JSON.get(type(value))
    return None if render is None else render(value)


def row_hash(prev_hash: bytes, fields: Mapping[str, Any]) -> bytes:
    """``SHA-256(prev_hash || canonical_bytes(fields))``: 32 bytes.

    Raises:
        InvalidInput: ``prev_hash`` is not 32 bytes, or a field has no canonical form.
    """
    prev = bytes(prev_hash)
    if len(prev) != 32:
        raise InvalidInput(f"prev_hash must be 32 bytes, got {len(prev)}")
    return hashlib.sha256(prev + canonical_bytes(fields)).digest()


def verify_chain(rows: Iterable[Mapping[str, Any]]) -> int | None:
    """Check one dispute's chain; return the seq of the first broken link, or None if intact.

    ``rows`` must be one dispute's ledger rows in ascending ``seq`` order, each holding the
    :data:`HASHED_FIELDS` plus ``prev_hash`` and ``row_hash`` (bytes). A link is broken when
    ``seq`` is not the expected next number (1, 2, 3, ...: the missing seq is returned),
    ``prev_hash`` differs from the previous row's ``row_hash`` (GENESIS for seq 1), or the
    recomputed hash differs from ``row_hash``. A row whose fields cannot be canonicalised
    counts as broken. Removal of the chain's tail is not detectable here; compare the last
    row with the projection's ``last_seq``/``last_hash`` for that.
    """
    expected_prev = GENESIS
    expected_seq = 1
    for row in rows:
        seq = row.get("seq")
        if seq != expected_seq:
            return expected_seq
        stored_prev = bytes(row.get("prev_hash") or b"")
        stored_hash = bytes(row.get("row_hash") or b"")
        if stored_prev != expected_prev:
            return expected_seq
        try:
            computed = row_hash(expected_prev, row)
        except InvalidInput:
            return expected_seq
        if computed != stored_hash:
            return expected_seq
        expected_prev = stored_hash
        expected_seq += 1
    return None
