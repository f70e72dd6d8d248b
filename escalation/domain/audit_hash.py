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
from json.encoder import encode_basestring
from typing import Any
from uuid import UUID

import orjson

from escalation.domain.errors import InvalidInput

HASH_VERSION = 1
GENESIS = bytes(32)
"""``prev_hash`` of the first row (seq 1) of every dispute's chain: 32 zero bytes."""

LEDGER_COLUMNS: tuple[str, ...] = (
    "dispute_id",
    "seq",
    "event",
    "match_decision",
    "actor",
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
    "recorded_at",
    "trace_id",
    "source_hash",
    "external_id",
    "fence_token",
    "details",
    "prev_hash",
    "row_hash",
    "chain_created_at",
)
"""Every column of the ledger (``escalation_audit``), the one list of their names, in the
order the audit export writes them (who, what, when, why, chain; docs/audit.md). The table
definition (``adapters.tables``) is checked against it when it is built."""

_NOT_HASHED = frozenset({"recorded_at", "prev_hash", "row_hash", "chain_created_at"})

HASHED_FIELDS: tuple[str, ...] = tuple(c for c in LEDGER_COLUMNS if c not in _NOT_HASHED)
"""Ledger columns covered by the hash: all but ``recorded_at`` (the database's clock),
``prev_hash`` and ``row_hash`` (the chain itself) and ``chain_created_at`` (the partition
key)."""


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


def is_canonical_json(value: Any) -> bool:
    """True when ``value`` is its own canonical form: only exact ``str``/``int``/``bool``/
    None, ``dict`` with ``str`` keys and ``list``/``tuple``, at every depth (what
    ``json.dumps`` writes as it is). Anything else (float, Decimal, datetime, UUID, bytes,
    subclasses) needs :func:`canonical_bytes`' conversions or is refused there."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is dict:
        return all(type(k) is str and is_canonical_json(v) for k, v in value.items())
    if kind is list or kind is tuple:
        return all(is_canonical_json(v) for v in value)
    return False


class CanonicalJson:
    """A JSON value decoded by :func:`decode_canonical_json`: float-free, so it is its own
    canonical form, and :func:`canonical_bytes` writes ``value`` as it is (a stored row's
    ``details``, read back for ``audit verify``, without walking it again)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        """Only :func:`decode_canonical_json` makes one (its ``value`` is checked there)."""
        self.value = value


class _NotCanonical(Exception):
    """A JSON number with a fraction or exponent (or NaN/Infinity): no canonical form."""


def _refuse(text: str) -> Any:
    raise _NotCanonical(text)


_DECODER = json.JSONDecoder(parse_float=_refuse, parse_constant=_refuse)
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def decode_canonical_json(text: str) -> CanonicalJson:
    """JSON text (e.g. a stored ``details``, as PostgreSQL prints ``jsonb``) decoded into
    its canonical form: integers at any magnitude stay exact; what the canonical form
    refuses (a number with a fraction or exponent, NaN, Infinity) is refused here. A decoded
    float-free JSON value (``str``/``int``/``bool``/None/``dict`` with string keys/
    ``list``) is its own canonical form, so :func:`canonical_bytes` takes it as it is.

    Raises:
        InvalidInput: a number with no canonical form. ValueError: not JSON.
    """
    try:
        value, end = _SCAN(text, 0)
        if end != len(text):  # something follows the value: the full decoder raises
            value = _DECODER.decode(text)
    except StopIteration:
        value = _decode_or_refuse(text)
    except _NotCanonical as exc:
        raise InvalidInput(f"JSON number {exc} has no canonical form (a float)") from None
    return CanonicalJson(value)


def _decode_or_refuse(text: str) -> Any:
    """The full decoder's answer for text the scanner found no value at (it raises)."""
    try:
        return _DECODER.decode(text)
    except _NotCanonical as exc:
        raise InvalidInput(f"JSON number {exc} has no canonical form (a float)") from None


canonical_string: Callable[[str], str] = encode_basestring
"""The canonical JSON text of one string, as :func:`canonical_bytes` writes it (quoted, the
escapes of ``json.dumps``, non-ASCII kept): the definition's own string encoder, for a
template that fills a string into bytes cut from :func:`canonical_bytes`' output."""


def canonical_json(value: Any) -> str:
    """The canonical JSON text of one value, as :func:`canonical_bytes` writes it inside a
    row (the same conversions and the same serialiser), for a template that fills a value
    into bytes cut from :func:`canonical_bytes`' output.

    Raises:
        InvalidInput: a value with no canonical form. UnicodeEncodeError: a lone surrogate.
    """
    form = value if is_canonical_json(value) else _canonical_value(value, "value")
    return _render(form).decode("utf-8")


def _render(doc: Any) -> bytes:
    """The one serialiser: a document already in canonical form to its UTF-8 JSON bytes,
    keys sorted, no whitespace. orjson with sorted keys yields exactly what ``json.dumps(...,
    sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` gives (the definition);
    what orjson refuses (an integer beyond 64 bits, a lone surrogate) is serialised by that
    ``json.dumps``, which gives the same bytes or raises (UnicodeEncodeError)."""
    try:
        return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return json.dumps(doc, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False).encode("utf-8")


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
    """The canonical UTF-8 JSON bytes of a ledger row's hashed fields: the one renderer
    (every ledger writer, the ENQUEUED rows of an enqueue or import, ``audit verify``, the
    projection check and the case file call it; docs/audit.md, "Canonical bytes (hash
    version 1)").

    Each value is first put in its canonical JSON-ready form (:func:`_fast_form` for the
    common exact types, :func:`_canonical_value` for the rest; a value already in that form,
    e.g. a stored row's text and a :class:`CanonicalJson`, as it is), then the document is
    serialised by :func:`_render` (``tests/unit/test_audit_spec.py`` checks these bytes
    against a verifier written from docs/audit.md alone).

    The same function takes a row in either shape: the Python values of a writer (aware
    datetimes, Decimal, UUID, dicts) or a stored row read back in canonical form (``audit
    verify --all``: instants, UUID and amount as the text PostgreSQL renders them, which is
    their canonical text, and ``details`` decoded by :func:`decode_canonical_json`).

    Args:
        fields: a mapping holding (a superset of) :data:`HASHED_FIELDS`; other keys such as
            ``recorded_at``, ``prev_hash`` and ``row_hash`` are ignored, missing ones are null.

    Raises:
        InvalidInput: a value that has no canonical form (naive datetime, float, ...).
        UnicodeEncodeError: a string holding a lone surrogate (no UTF-8 bytes).
    """
    get = fields.get
    doc: dict[str, Any] = {}
    for name in _SORTED_FIELDS:
        value = get(name)
        kind = type(value)
        if kind is str or kind is int or value is None:  # most fields: already canonical
            doc[name] = value
            continue
        if kind is CanonicalJson:  # decoded by decode_canonical_json: its own form
            doc[name] = value.value
            continue
        form = _fast_form(value)
        doc[name] = _canonical_value(value, name) if form is _SLOW else form
    return _render(doc)


_SORTED_FIELDS: tuple[str, ...] = tuple(sorted(HASHED_FIELDS))


def stored_canonical_bytes(fields: dict[str, str | int | None],
                           details: CanonicalJson) -> bytes:
    """:func:`canonical_bytes` of a stored row read back in canonical form, in one step:
    ``fields`` holds exactly the hashed fields but ``details``, each an exact ``str``,
    ``int`` or None (instants, UUID and amount as their canonical text, as ``audit verify
    --all`` reads them), and ``details`` is decoded by :func:`decode_canonical_json`.

    The same bytes as ``canonical_bytes({**fields, "details": details})`` by construction:
    there each of these values is its own canonical form (the identity step), and the
    document goes through the same serialiser (:func:`_render`); here the identity step is
    left out, which saves about a microsecond per row of a ledger walk
    (``tests/unit/test_audit_hash.py`` compares the two on generated rows). ``fields`` is
    used as the document (``details`` is added to it).

    Raises:
        UnicodeEncodeError: a string holding a lone surrogate (as :func:`canonical_bytes`).
    """
    fields["details"] = details.value  # its canonical form
    return _render(fields)


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
