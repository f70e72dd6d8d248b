"""An independent re-implementation of the ledger's canonical bytes and row hash, written from
docs/audit.md ("Canonical bytes") alone: no ``escalation`` import, no ``json.dumps``.

It takes a row as ``escalation audit export --format jsonl`` prints it (times already
``YYYY-MM-DDTHH:MM:SS.ffffffZ`` strings, money a decimal string, UUIDs strings, hashes hex,
``details`` an object) and renders the bytes by the written rules, the way a verifier in
another language would. The tests compare it with the worked examples in the document and
with rows stored by the product in PostgreSQL.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

HASHED = (
    "dispute_id", "seq", "event", "match_decision", "from_tier", "to_tier", "ladder",
    "ladder_version", "calendar_version", "materiality", "due_at", "next_due_at",
    "regulatory_deadline", "decided_at", "actor", "trace_id", "source_hash", "external_id",
    "fence_token", "details",
)
_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
          "\r": "\\r"}
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")
_MONEY = re.compile(r"-?\d+\.\d{2}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _string(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch in _SHORT:
            out.append(_SHORT[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _value(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)  # exact decimal digits, any magnitude
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ",".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        keys = sorted(value)  # Python orders str by code point, as the rules say
        return "{" + ",".join(_string(k) + ":" + _value(value[k]) for k in keys) + "}"
    raise ValueError(f"no canonical form for {type(value).__name__}")


def canonical(row: Mapping[str, Any]) -> bytes:
    """The canonical bytes of an exported row (the 20 hashed members, code-point order)."""
    for name in ("due_at", "next_due_at", "regulatory_deadline", "decided_at"):
        if row.get(name) is not None and not _TIME.fullmatch(row[name]):
            raise ValueError(f"{name}: not YYYY-MM-DDTHH:MM:SS.ffffffZ: {row[name]!r}")
    if not _MONEY.fullmatch(row["materiality"]):
        raise ValueError(f"materiality: not a two-decimal string: {row['materiality']!r}")
    if not _UUID.fullmatch(row["dispute_id"]):
        raise ValueError(f"dispute_id: not a lower-case UUID: {row['dispute_id']!r}")
    members = [_string(name) + ":" + _value(row.get(name)) for name in sorted(HASHED)]
    return ("{" + ",".join(members) + "}").encode("utf-8")


def row_hash(prev_hash_hex: str, row: Mapping[str, Any]) -> str:
    """``SHA-256(prev_hash || canonical bytes)`` as lower-case hex."""
    return hashlib.sha256(bytes.fromhex(prev_hash_hex) + canonical(row)).hexdigest()


def check_chain(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Problems of one dispute's exported rows in seq order (empty when every hash holds)."""
    problems: list[str] = []
    prev = "00" * 32
    for expect_seq, row in enumerate(rows, start=1):
        if row["seq"] != expect_seq or row["prev_hash"] != prev:
            problems.append(f"seq {row['seq']}: link broken")
        if row_hash(prev, row) != row["row_hash"]:
            problems.append(f"seq {row['seq']}: hash differs")
        prev = row["row_hash"]
    return problems
