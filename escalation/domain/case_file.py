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
    the checkpoint); ``checked``: one line per kind of check that passed, with counts;
    ``signed``: False for an export whose manifest carries no signature (only ever without
    a pinned key: with one that is an error), which then proves nothing about who wrote it.
    """

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    key_pinned: bool = False
    checkpoint_id: int | None = None
    signed: bool = True

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
        return _verify_bundle(raw, pinned_key, report)
    except (AttributeError, TypeError, KeyError, ValueError, InvalidInput) as exc:
        report.errors.append(f"malformed case file: {type(exc).__name__}: {exc}")
        return report


def _verify_bundle(raw: bytes, pinned_key: bytes | None, report: BundleReport) -> BundleReport:
    """:func:`verify_bundle`'s checks; a malformed member raises (the caller reports it)."""
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


# --------------------------------------------------------------------------- ledger export
EXPORT_INTS = frozenset({"seq", "ladder_version", "fence_token"})
"""Export columns that hold integers (every other hashed column is text, or ``details``)."""


def export_row(columns: Sequence[str], cells: Sequence[str]) -> dict[str, Any]:
    """One CSV row of ``audit export`` as the values its canonical bytes are made of: an
    empty cell is NULL (``details``: ``{}``), a neutralised cell loses its one leading
    ``'`` (``domain.csv_cells``; so a lone ``'``, how the export writes the empty string,
    is ``""``), integers and ``details`` are parsed.

    Raises:
        InvalidInput: a cell that is not what its column holds.
    """
    from escalation.domain.csv_cells import restore_cell

    row: dict[str, Any] = {}
    for name, cell in zip(columns, cells, strict=True):
        if cell == "":
            row[name] = {} if name == "details" else None
            continue
        text = restore_cell(cell)
        try:
            row[name] = (int(text) if name in EXPORT_INTS
                         else strict_loads(text) if name == "details" else text)
        except ValueError:
            raise InvalidInput(f"{name}: {text!r} is not an integer") from None
    return row


@dataclass(slots=True)
class _Links:
    """Per dispute: ``seq -> (prev_hash, row_hash)`` as exported (hex)."""

    by_seq: dict[int, tuple[str, str]] = field(default_factory=dict)


def _export_rows(fmt: str, lines: Any, columns: Sequence[str], report: BundleReport) -> Any:
    """Rows of an export file (CSV or JSON Lines), as dicts of exported values."""
    import csv

    if fmt == "jsonl":
        for n, line in enumerate(lines, start=1):
            try:
                row = strict_loads(line)
            except InvalidInput as exc:
                report.errors.append(f"line {n}: {exc}")
                continue
            yield row
        return
    reader = csv.reader(line.decode("utf-8").removeprefix("\ufeff") if n == 0
                        else line.decode("utf-8") for n, line in enumerate(lines))
    header = next(reader, [])
    if tuple(header) != tuple(columns):
        report.errors.append("export: the CSV header is not the manifest's columns")
        return
    for cells in reader:
        try:
            yield export_row(columns, cells)
        except (InvalidInput, ValueError) as exc:
            report.errors.append(f"export row {reader.line_num}: {exc}")


UNSIGNED_EXPORT = ("EXPORT NOT SIGNED: the manifest carries no signature, so anyone can "
                   "edit rows, recompute their hashes and the file's SHA-256 and pass these "
                   "checks; the file proves nothing about who exported it")
"""The warning for an unsigned export checked without a pinned key."""


def _manifest_trust(manifest: Mapping[str, Any], pinned_key: bytes | None,
                    report: BundleReport) -> tuple[bytes, int] | None:
    """The manifest's signature and the digest of the checkpoint it names; return the
    signed ``(heads_root, head_count)`` or None. With ``pinned_key`` an unsigned manifest,
    or one naming no checkpoint, is an error (as for a case file); without it, a warning
    (an unsigned one also clears ``report.signed``)."""
    key = _key_of(manifest, report, pinned_key) if "signature" in manifest else pinned_key
    if "signature" not in manifest:
        report.signed = False
        if pinned_key is not None:
            report.key_pinned = True
            report.errors.append("the file is not signed by the pinned public key (the "
                                 "manifest carries no signature)")
        else:
            report.warnings.append(UNSIGNED_EXPORT)
    elif key is not None:
        problem = signature_error(manifest, key)
        if problem is not None:
            report.errors.append(f"manifest: {problem}")
        else:
            report.checked.append("manifest signature verifies")
    cp = manifest.get("checkpoint")
    signed: tuple[bytes, int] | None = None
    if not isinstance(cp, dict) and pinned_key is not None:
        report.errors.append("the manifest names no checkpoint signed by the pinned public "
                             "key: no row is proved against a signed Merkle root")
    elif not isinstance(cp, dict):
        report.warnings.append("the manifest names no checkpoint: the rows rest on their "
                               "chains alone")
    elif key is None:
        digest = cp.get("digest") or {}
        sig = digest.get("signature") if isinstance(digest, dict) else None
        carried = base64.b64decode(sig["public_key"]) if isinstance(sig, dict) else None
        if carried is None:
            report.errors.append("checkpoint digest is not signed")
        else:
            report.warnings.append("PUBLIC KEY NOT PINNED: the digest was checked only "
                                   "against the key it carries; pass --public-key")
            signed = check_digest(digest, carried, report)
    else:
        signed = check_digest(cp.get("digest"), key, report)
    return signed


def _hash_rows(manifest: Mapping[str, Any], lines: Any, report: BundleReport
               ) -> tuple[dict[str, _Links], int, Any]:
    """Recompute every exported row's hash; return the links per dispute, the row count
    and the SHA-256 of the file's bytes."""
    columns = list(manifest.get("columns") or [])
    sha = hashlib.sha256()

    def hashed(source: Any) -> Any:
        for line in source:
            sha.update(line)
            yield line

    chains: dict[str, _Links] = {}
    count = bad = 0
    for row in _export_rows(str(manifest.get("format")), hashed(lines), columns, report):
        count += 1
        try:
            did, seq = str(row["dispute_id"]), int(row["seq"])
            prev, stated = str(row["prev_hash"]), str(row["row_hash"])
            digest_hex = hashlib.sha256(bytes.fromhex(prev) + canonical_bytes(row)).hexdigest()
        except (KeyError, ValueError, TypeError, InvalidInput) as exc:
            report.errors.append(f"export row {count}: {exc}")
            continue
        if digest_hex != stated:
            bad += 1
            if bad <= 10:
                report.errors.append(f"dispute {did} seq {seq}: row_hash does not recompute")
        chains.setdefault(did, _Links()).by_seq[seq] = (prev, stated)
    if bad > 10:
        report.errors.append(f"... {bad} row(s) in all whose hash does not recompute")
    return chains, count, sha


def verify_export(manifest: Mapping[str, Any], lines: Any, heads: Any,
                  pinned_key: bytes | None = None, file_name: str | None = None
                  ) -> BundleReport:
    """Verify an ``audit export`` file offline against its manifest and the checkpoint the
    manifest names (docs/audit.md "The examiner's case file").

    Args:
        manifest: the parsed ``<file>.manifest.json``.
        lines: the export file's lines as bytes (with their line ends), in order.
        heads: the lines of the manifest's ``checkpoint.heads_file`` (``dispute_id,seq,
            row_hash`` per sealed head, in Merkle leaf order), or None when absent.
        pinned_key: the raw Ed25519 key the examiner trusts, or None (then a warning). With
            it, an unsigned manifest or one that names no checkpoint fails.
        file_name: the name of the file ``lines`` were read from; the manifest's ``file``
            must be exactly it (a manifest copied next to another file fails).

    Checks: the file name, the manifest's signature and the digest's, the file's SHA-256
    and row count, every row's hash recomputed from its exported values, the links between
    a dispute's consecutive rows (from 32 zero bytes for seq 1), the heads file against the
    signed root, and every sealed head present in the export against its row.
    """
    report = BundleReport()
    try:
        return _verify_export(_Export(manifest, lines, heads, pinned_key, file_name), report)
    except (AttributeError, TypeError, KeyError, ValueError, InvalidInput) as exc:
        report.errors.append(f"malformed export or manifest: {type(exc).__name__}: {exc}")
        return report


@dataclass(frozen=True, slots=True)
class _Export:
    """What :func:`verify_export` checks (its arguments, described there)."""

    manifest: Mapping[str, Any]
    lines: Any
    heads: Any
    pinned_key: bytes | None
    file_name: str | None


def _verify_export(export: _Export, report: BundleReport) -> BundleReport:
    """:func:`verify_export`'s checks; a malformed member raises (the caller reports it)."""
    manifest, lines, heads = export.manifest, export.lines, export.heads
    pinned_key, file_name = export.pinned_key, export.file_name
    cp = manifest.get("checkpoint")
    named = manifest.get("file")
    if file_name is not None and named != file_name:
        report.errors.append(f"the manifest is the manifest of {named!r}, not of "
                             f"{file_name!r} (the file checked)")
    signed = _manifest_trust(manifest, pinned_key, report)
    chains, count, sha = _hash_rows(manifest, lines, report)
    if sha.hexdigest() != manifest.get("sha256"):
        report.errors.append("export file: SHA-256 differs from the manifest's")
    if count != manifest.get("row_count"):
        report.errors.append(f"export file: {count} row(s), the manifest says "
                             f"{manifest.get('row_count')}")
    _check_links(chains, manifest, report)
    report.checked.append(f"{count} exported row(s) of {len(chains)} dispute(s): hashes "
                          f"recomputed from the exported values, file SHA-256 and row count")
    if isinstance(cp, dict) and signed is not None:
        _check_export_heads(cp, heads, chains, signed, report)
    return report


def _check_links(chains: Mapping[str, _Links], manifest: Mapping[str, Any],
                 report: BundleReport) -> None:
    """Consecutive rows link; a whole-ledger export has every chain from seq 1."""
    whole = not any((manifest.get("time_range") or {}).get(k) for k in ("from", "to"))
    for did, links in chains.items():
        seqs = sorted(links.by_seq)
        if whole and seqs[0] != 1:
            report.errors.append(f"dispute {did}: rows before seq {seqs[0]} are missing")
        for seq in seqs:
            prev, _ = links.by_seq[seq]
            if seq == 1 and prev != GENESIS.hex():
                report.errors.append(f"dispute {did} seq 1: prev_hash is not 32 zero bytes")
            before = links.by_seq.get(seq - 1)
            if before is not None and before[1] != prev:
                report.errors.append(f"dispute {did} seq {seq}: prev_hash is not seq "
                                     f"{seq - 1}'s row_hash")
            elif before is None and seq > 1 and seq - 1 >= seqs[0]:
                report.errors.append(f"dispute {did}: seq {seq - 1} is missing")


def _check_export_heads(cp: Mapping[str, Any], heads: Any, chains: Mapping[str, _Links],
                        signed: tuple[bytes, int], report: BundleReport) -> None:
    """The heads file gives the signed root; each sealed head in the export matches."""
    if heads is None:
        report.errors.append(f"checkpoint heads file {cp.get('heads_file')} is missing")
        return
    sha = hashlib.sha256()
    leaves: list[bytes] = []
    sealed: dict[str, tuple[int, str]] = {}
    try:
        for line in heads:
            sha.update(line)
            did, seq_text, digest_hex = line.decode("ascii").strip().split(",")
            leaves.append(head_leaf(UUID(did), int(seq_text), bytes.fromhex(digest_hex)))
            sealed[did] = (int(seq_text), digest_hex)
    except (ValueError, InvalidInput) as exc:
        report.errors.append(f"checkpoint heads file: malformed ({exc})")
        return
    from escalation.domain.merkle import merkle_root

    root, count = signed
    if sha.hexdigest() != cp.get("heads_sha256") or len(leaves) != count \
            or merkle_root(leaves) != root:
        report.errors.append("checkpoint heads file does not give the signed Merkle root")
        return
    newer = uncovered = 0
    for did, links in chains.items():
        head = sealed.get(did)
        if head is None:
            uncovered += 1
            continue
        seq, digest_hex = head
        row = links.by_seq.get(seq)
        if row is not None and row[1] != digest_hex:
            report.errors.append(f"dispute {did} seq {seq} differs from the head checkpoint "
                                 f"{report.checkpoint_id} sealed")
        newer += sum(1 for s in links.by_seq if s > seq)
    report.checked.append(f"{len(leaves)} sealed head(s) give the signed root; every sealed "
                          f"head present in the export matches its row")
    if newer:
        report.warnings.append(f"{newer} row(s) are newer than checkpoint "
                               f"{report.checkpoint_id} (they rest on their chains)")
    if uncovered:
        report.warnings.append(f"{uncovered} dispute(s) are not covered by checkpoint "
                               f"{report.checkpoint_id} yet")
