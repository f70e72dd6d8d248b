"""The examiner's case file: its format and the offline verifier (pure; no database, no Redis).

A case file (format :data:`FORMAT`; docs/audit.md "The examiner's case file"; ADR 0016) is
one JSON document, written as canonical JSON (:func:`encode`: keys sorted, no whitespace,
UTF-8, non-ASCII as is) plus one newline, holding for each exported dispute every ledger row with
its canonical bytes, ``prev_hash`` and ``row_hash``, the RFC 6962 inclusion proof of the
chain head sealed by the covering checkpoint, and the dispute's deadlines; next to them the
ladder files and calendars those rows name, the signed checkpoint digest and its public key;
the whole document is signed (Ed25519) by the same key.

:func:`verify_bundle` re-checks all of it from the bytes alone: the file is canonical (so a
changed space or key order fails too), the document's and the digest's signatures, the
digest's own hash, every chain (hashes recomputed from the canonical bytes, which must
themselves be canonical), each sealed head's inclusion proof in the signed root, and the
files' SHA-256. It imports nothing that needs a server: ``escalation audit verify-bundle``
runs it on an examiner's laptop.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from escalation.domain.audit_hash import GENESIS, HASHED_FIELDS, canonical_bytes
from escalation.domain.errors import InvalidInput
from escalation.domain.merkle import checkpoint_hash, head_leaf, root_from_inclusion

FORMAT = "escalation-case-file/1"
"""``format`` member of a case file."""
DIGEST_FORMAT = "escalation-checkpoint-digest/1"
"""``format`` member of the signed checkpoint digest inside it (``audit checkpoint --out``)."""
MAX_DISPUTES = 500
"""Most disputes one case file holds (a filtered set is refused above it)."""


def canonical_json(doc: Mapping[str, Any]) -> bytes:
    """Canonical JSON of ``doc``: keys sorted, ``,``/``:`` without spaces, UTF-8, non-ASCII
    kept as is (``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)``)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")


def signed_bytes(doc: Mapping[str, Any]) -> bytes:
    """What a ``signature`` member signs: :func:`canonical_json` of ``doc`` without it (the
    checkpoint digest's rule, ``adapters.signing.canonical``)."""
    return canonical_json({k: v for k, v in doc.items() if k != "signature"})


def encode(doc: Mapping[str, Any]) -> bytes:
    """The file bytes of a case file: :func:`canonical_json` and one ``\\n``."""
    return canonical_json(doc) + b"\n"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InvalidInput(f"duplicate member {key!r}")
        out[key] = value
    return out


def _no_float(text: str) -> Any:
    raise InvalidInput(f"number {text} has a fraction or exponent (no canonical form)")


def _no_constant(text: str) -> Any:
    raise InvalidInput(f"{text} is not JSON")


def strict_loads(text: str | bytes) -> Any:
    """``json.loads`` refusing duplicate members, NaN/Infinity and fractional numbers.

    Raises:
        InvalidInput: any of those, or text that is not JSON.
    """
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_float=_no_float,
                          parse_constant=_no_constant)
    except ValueError as exc:
        raise InvalidInput(f"not JSON: {exc}") from None


def public_key_from_pem(pem: bytes) -> bytes:
    """The raw 32-byte Ed25519 public key of a SubjectPublicKeyInfo PEM (what
    ``escalation audit keygen --public-out`` and ``audit public-key`` write).

    Raises:
        InvalidInput: not a PEM public key, or not an Ed25519 one.
    """
    try:
        key = serialization.load_pem_public_key(pem)
    except ValueError as exc:
        raise InvalidInput(f"not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise InvalidInput("not an Ed25519 public key")
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def signature_error(doc: Mapping[str, Any], raw_key: bytes) -> str | None:
    """None when ``doc["signature"]`` is a valid Ed25519 signature of :func:`signed_bytes`
    by ``raw_key`` and names that key; else why not."""
    sig = doc.get("signature")
    if not isinstance(sig, dict) or sig.get("alg") != "Ed25519":
        return "not signed (no Ed25519 signature member)"
    try:
        named = base64.b64decode(str(sig.get("public_key", "")), validate=True)
        value = base64.b64decode(str(sig.get("value", "")), validate=True)
        if named != raw_key:
            return "signed by another key than the one checked"
        Ed25519PublicKey.from_public_bytes(raw_key).verify(value, signed_bytes(doc))
    except (InvalidSignature, ValueError):
        return "signature does not verify"
    return None


@dataclass(slots=True)
class BundleReport:
    """What :func:`verify_bundle` found. ``errors``: anything that fails the file (exit 1);
    ``warnings``: what holds but is weaker than it could be (an unpinned key, rows newer than
    the checkpoint); ``checked``: one line per kind of check that passed, with counts."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    key_pinned: bool = False
    checkpoint_id: int | None = None

    @property
    def ok(self) -> bool:
        """True when nothing failed (warnings do not fail a file)."""
        return not self.errors


def _key_of(doc: Mapping[str, Any], report: BundleReport, pinned: bytes | None) -> bytes | None:
    """The raw key the file is checked under: the pinned one, else the one it carries."""
    sig = doc.get("signature")
    carried: bytes | None = None
    if isinstance(sig, dict):
        try:
            carried = base64.b64decode(str(sig.get("public_key", "")), validate=True)
        except ValueError:
            carried = None
    if pinned is not None:
        report.key_pinned = True
        if carried != pinned:
            report.errors.append("the file is not signed by the pinned public key")
        return pinned
    report.warnings.append(
        "PUBLIC KEY NOT PINNED: the signatures were checked only against the key the file "
        "carries, which anyone can make; pass --public-key with the key you trust")
    if carried is None or len(carried) != 32:
        report.errors.append("the file carries no Ed25519 public key")
        return None
    return carried


def check_digest(digest: Any, key: bytes, report: BundleReport) -> tuple[bytes, int] | None:
    """Check a signed checkpoint digest (format, signature under ``key``, its own hash);
    return ``(heads_root, head_count)`` as signed, or None when it does not hold."""
    if not isinstance(digest, dict) or digest.get("format") != DIGEST_FORMAT:
        report.errors.append(f"checkpoint: not an {DIGEST_FORMAT} digest")
        return None
    problem = signature_error(digest, key)
    if problem is not None:
        report.errors.append(f"checkpoint {digest.get('checkpoint_id')} digest: {problem}")
        return None
    try:
        cp_id, count = int(digest["checkpoint_id"]), int(digest["head_count"])
        root = bytes.fromhex(str(digest["heads_root"]))
        prev = bytes.fromhex(str(digest["prev_checkpoint_hash"]))
        stated = str(digest["checkpoint_hash"])
    except (KeyError, ValueError, TypeError):
        report.errors.append("checkpoint digest: malformed fields")
        return None
    if len(root) != 32 or len(prev) != 32 or checkpoint_hash(cp_id, count, root, prev).hex() \
            != stated:
        report.errors.append(f"checkpoint {cp_id} digest: checkpoint_hash does not recompute")
        return None
    report.checkpoint_id = cp_id
    report.checked.append(f"checkpoint {cp_id} digest signed and self-consistent "
                          f"({count} heads, root {root.hex()[:16]}...)")
    return root, count


def check_chain(dispute_id: str, rows: Sequence[Any], report: BundleReport) -> list[bytes]:
    """Recompute one dispute's chain from its rows' canonical bytes; return the row hashes
    (as far as the chain holds). Each row's ``canonical`` text must be exactly the canonical
    bytes of the 20 hashed members (docs/audit.md "Canonical bytes") of this dispute and seq.
    """
    hashes: list[bytes] = []
    prev = GENESIS
    for seq, row in enumerate(rows, start=1):
        where = f"dispute {dispute_id} seq {seq}"
        try:
            text = str(row["canonical"])
            fields = strict_loads(text)
            if not isinstance(fields, dict) or set(fields) != set(HASHED_FIELDS):
                raise InvalidInput("canonical bytes do not hold exactly the hashed members")
            if canonical_bytes(fields) != text.encode("utf-8"):
                raise InvalidInput("canonical bytes are not in canonical form")
            if fields["dispute_id"] != dispute_id or fields["seq"] != seq:
                raise InvalidInput("row names another dispute or seq")
            if row["prev_hash"] != prev.hex():
                raise InvalidInput("prev_hash is not the previous row's hash")
            digest = hashlib.sha256(prev + text.encode("utf-8")).digest()
            if row["row_hash"] != digest.hex():
                raise InvalidInput("row_hash does not recompute")
        except (InvalidInput, KeyError, TypeError) as exc:
            report.errors.append(f"{where}: {exc}")
            return hashes
        hashes.append(digest)
        prev = digest
    return hashes


def _check_sealed(dispute_id: str, hashes: list[bytes], sealed: Any,
                  signed: tuple[bytes, int] | None, report: BundleReport) -> None:
    """The sealed head's inclusion proof against the signed root; rows after it are a warning."""
    if sealed is None:
        report.warnings.append(f"dispute {dispute_id}: no checkpoint covers its chain yet "
                               f"(rows 1-{len(hashes)} rest on the file's signature alone)")
        return
    if signed is None:
        return  # the digest failed: already an error
    try:
        seq, index = int(sealed["seq"]), int(sealed["leaf_index"])
        proof = [bytes.fromhex(str(p)) for p in sealed["proof"]]
        leaf = head_leaf(UUID(dispute_id), seq, hashes[seq - 1])
    except (KeyError, ValueError, TypeError, IndexError, InvalidInput):
        report.errors.append(f"dispute {dispute_id}: sealed head malformed or beyond the chain")
        return
    root, count = signed
    if root_from_inclusion(leaf, index, count, proof) != root:
        report.errors.append(f"dispute {dispute_id}: head seq {seq} is not in the signed "
                             f"Merkle root (inclusion proof fails)")
        return
    if seq < len(hashes):
        report.warnings.append(f"dispute {dispute_id}: rows {seq + 1}-{len(hashes)} are newer "
                               f"than the checkpoint (they rest on the chain and the file's "
                               f"signature)")


def _check_files(doc: Mapping[str, Any], used_ladders: set[tuple[str, int]],
                 used_calendars: set[str], report: BundleReport) -> None:
    """Ladder and calendar files: their SHA-256, and every version the rows name present."""
    shipped: set[tuple[str, int]] = set()
    for entry in doc.get("ladders") or []:
        key = (str(entry.get("ladder")), int(entry.get("version", 0)))
        text = entry.get("text")
        if text is None:
            report.warnings.append(f"ladder {key[0]}@{key[1]}: file not available at export")
        elif hashlib.sha256(str(text).encode("utf-8")).hexdigest() != entry.get("sha256"):
            report.errors.append(f"ladder {key[0]}@{key[1]}: file text does not match its "
                                 f"SHA-256")
        shipped.add(key)
    for name, version in sorted(used_ladders - shipped):
        report.errors.append(f"ladder {name}@{version} is used by the rows but not in the file")
    cals = doc.get("calendars") or {}
    for entry in cals.get("files") or []:
        if hashlib.sha256(str(entry.get("text", "")).encode("utf-8")).hexdigest() \
                != entry.get("sha256"):
            report.errors.append(f"calendar file {entry.get('name')}: text does not match its "
                                 f"SHA-256")
    missing = used_calendars - set(cals.get("versions") or [])
    for cal_version in sorted(missing):
        report.errors.append(f"calendar version {cal_version} is used by the rows but not listed")
    report.checked.append(f"{len(shipped)} ladder file(s) and {len(cals.get('files') or [])} "
                          f"calendar file(s) match their SHA-256")


def verify_bundle(raw: bytes, pinned_key: bytes | None = None) -> BundleReport:
    """Verify a case file from its bytes (see the module doc). ``pinned_key``: the raw
    Ed25519 public key the examiner trusts (:func:`public_key_from_pem`); without it the
    report warns that the key was not pinned. Never raises on a bad file: every problem is
    an entry of ``errors``."""
    report = BundleReport()
    try:
        doc = strict_loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, InvalidInput) as exc:
        report.errors.append(f"not a case file: {exc}")
        return report
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        report.errors.append(f"not an {FORMAT} file")
        return report
    if encode(doc) != raw:
        report.errors.append("the file is not in canonical form (a byte was changed, added or "
                             "removed outside the values)")
    key = _key_of(doc, report, pinned_key)
    if key is None:
        return report
    problem = signature_error(doc, key)
    if problem is not None:
        report.errors.append(f"case file: {problem}")
    else:
        report.checked.append("case file signature verifies")
    signed = check_digest(doc.get("checkpoint"), key, report)
    used_ladders: set[tuple[str, int]] = set()
    used_calendars: set[str] = set()
    rows_checked = 0
    disputes = doc.get("disputes") or []
    for entry in disputes:
        did = str(entry.get("dispute_id"))
        rows = entry.get("rows") or []
        if not rows:
            report.errors.append(f"dispute {did}: no ledger rows")
            continue
        hashes = check_chain(did, rows, report)
        rows_checked += len(hashes)
        if len(hashes) == len(rows):
            _check_sealed(did, hashes, entry.get("sealed"), signed, report)
        for row in rows[: len(hashes)]:
            fields = strict_loads(row["canonical"])
            used_ladders.add((fields["ladder"], fields["ladder_version"]))
            if fields["calendar_version"] is not None:
                used_calendars.add(fields["calendar_version"])
    report.checked.append(f"{len(disputes)} dispute(s), {rows_checked} ledger row(s): chains "
                          f"recomputed from their canonical bytes")
    _check_files(doc, used_ladders, used_calendars, report)
    return report
